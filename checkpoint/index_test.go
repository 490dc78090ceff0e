package checkpoint

import (
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		shards   string // sorted, space-separated
		problems string // one per line
		err      string
		refused  int // tensors whose entry is refused
	}{
		{"plain", `{"metadata":{"total_size":12},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors","c":"m-1.safetensors"}}`,
			"m-1.safetensors m-2.safetensors", "", "", 0},
		{"subdirectory and dot", `{"weight_map":{"a":"sub/m.safetensors","b":"./sub/./m.safetensors","c":"sub//m.safetensors"}}`,
			"sub/m.safetensors", "", "", 0},
		{"refused entries", `{"weight_map":{"a":"/etc/m.safetensors","b":"../m.safetensors","c":"x/../../m.safetensors",
			"d":"x/..","e":"","f":".","g":"ok.safetensors","h":"/etc/m.safetensors","i":"a\u0000b"}}`,
			"ok.safetensors", strings.Join([]string{
				`model.safetensors.index.json: shard entry "" is empty; refused`,
				`model.safetensors.index.json: shard entry "." names the checkpoint directory itself; refused`,
				`model.safetensors.index.json: shard entry "../m.safetensors" has a .. component; refused`,
				`model.safetensors.index.json: shard entry "/etc/m.safetensors" is an absolute path; refused`,
				`model.safetensors.index.json: shard entry "a\x00b" holds a NUL byte; refused`,
				`model.safetensors.index.json: shard entry "x/.." has a .. component; refused`,
				`model.safetensors.index.json: shard entry "x/../../m.safetensors" has a .. component; refused`,
			}, "\n"), "", 8},
		{"a name with dots is fine", `{"weight_map":{"a":"..m.safetensors","b":"m..safetensors"}}`, "..m.safetensors m..safetensors", "", "", 0},
		{"values of other types", `{"weight_map":{"a":1,"b":null,"c":["m"],"d":"m"}}`, "m", strings.Join([]string{
			`model.safetensors.index.json: tensor a: weight_map value 1 is not a file name`,
			`model.safetensors.index.json: tensor b: weight_map value null is not a file name`,
			`model.safetensors.index.json: tensor c: weight_map value ["m"] is not a file name`,
		}, "\n"), "", 3},
		// Decoded as strings, a null would read as an empty entry.
		{"null among strings", `{"weight_map":{"b":null,"d":"m"}}`, "m",
			`model.safetensors.index.json: tensor b: weight_map value null is not a file name`, "", 1},
		{"empty weight_map", `{"weight_map":{}}`, "", "", "", 0},
		{"no weight_map", `{"metadata":{}}`, "", "", "has no weight_map object", 0},
		{"weight_map not an object", `{"weight_map":["a"]}`, "", "", "does not parse", 0},
		{"not JSON", `{"weight_map":`, "", "", "does not parse", 0},
		{"not an object", `[]`, "", "", "does not parse", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx, err := parseIndex([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(idx.shards, " "); got != tt.shards {
				t.Errorf("shards %q, want %q", got, tt.shards)
			}
			var ps []string
			for _, p := range idx.problems {
				ps = append(ps, p.String())
			}
			if got := strings.Join(ps, "\n"); got != tt.problems {
				t.Errorf("problems\n%s\nwant\n%s", got, tt.problems)
			}
			total, refused := 0, 0
			for _, s := range idx.shards {
				total += idx.count[s]
			}
			for _, s := range idx.weightMap {
				if s == "" {
					refused++
				}
			}
			if total+refused != len(idx.weightMap) || refused != tt.refused {
				t.Errorf("counts %v and %d refused do not add up to %d entries, want %d refused", idx.count, refused, len(idx.weightMap), tt.refused)
			}
		})
	}
}

// TestWeightMapBound: an index of more members than the bound is refused
// before it is decoded; commas in names, values and nested values do not
// count.
func TestWeightMapBound(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
	}{
		{`{}`, ""},
		{` { "a" : "m" , "b" : "m" } `, ""},
		{`{"a\",":"m,","b":[1,2,{"c":3,"d":4}]}`, ""},
		{`{"a":"m","a":"n","b":"m"}`, "weight_map has more than 2 entries, the limit"},
		{`{"a":"m","b":"m","c":"m"}`, "weight_map has more than 2 entries, the limit"},
	} {
		_, _, err := decodeWeightMap([]byte(tt.in), 2)
		if (err == nil) != (tt.want == "") || err != nil && err.Error() != tt.want {
			t.Errorf("%s: %v, want %q", tt.in, err, tt.want)
		}
	}
}

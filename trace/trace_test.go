package trace

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestParsePrompts(t *testing.T) {
	tests := []struct {
		name, in, err string
		n             int
	}{
		{"text and ids", `[{"id":"a","label":"A","text":"hi"},{"id":"b-2_x","token_ids":[1,2]}]`, "", 2},
		{"not a list", `{"id":"a","text":"hi"}`, "JSON list", 0},
		{"empty list", `[]`, "no prompts", 0},
		{"trailing", `[{"id":"a","text":"hi"}] x`, "trailing", 0},
		{"unknown field", `[{"id":"a","txt":"hi"}]`, `unknown field "txt"`, 0},
		{"no id", `[{"text":"hi"}]`, "prompt 1: no id", 0},
		{"bad id", `[{"id":"a b","text":"hi"}]`, `id "a b" must match`, 0},
		{"dot in id", `[{"id":"a.b","text":"hi"}]`, "must match", 0},
		{"duplicate", `[{"id":"a","text":"x"},{"id":"a","text":"y"}]`, "prompt 2 (a): id already used by prompt 1", 0},
		{"both", `[{"id":"a","text":"x","token_ids":[1]}]`, "not both", 0},
		{"neither", `[{"id":"a","label":"x"}]`, "give text or token_ids", 0},
		{"empty text", `[{"id":"a","text":""}]`, "empty text", 0},
		{"empty ids", `[{"id":"a","token_ids":[]}]`, "empty token_ids", 0},
		{"negative id", `[{"id":"a","token_ids":[3,-1]}]`, "token_ids[1] = -1", 0},
		{"fractional id", `[{"id":"a","token_ids":[1.5]}]`, "JSON list", 0},
	}
	for _, tt := range tests {
		p, err := ParsePrompts([]byte(tt.in))
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && len(p) != tt.n:
			t.Errorf("%s: %d prompts, want %d", tt.name, len(p), tt.n)
		}
	}
}

func TestEncodeWithoutTokenizer(t *testing.T) {
	if err := Encode(DefaultPrompts(), nil, 1000); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("text prompts without a tokenizer: %v", err)
	}
	p := []Prompt{{ID: "a", TokenIDs: []int{1, 2}}}
	if err := Encode(p, nil, 1000); err != nil || p[0].Tokens != nil {
		t.Errorf("token prompts without a tokenizer: %v, tokens %v", err, p[0].Tokens)
	}
	p = []Prompt{{ID: "a", TokenIDs: []int{1, 1000}}}
	if err := Encode(p, nil, 1000); err == nil || !strings.Contains(err.Error(), "outside the model's vocabulary") {
		t.Errorf("id past the vocabulary: %v", err)
	}
	// JSON shows the missing tokens as null.
	b, _ := encode(Prompt{ID: "a", TokenIDs: []int{1}})
	if !bytes.Contains(b, []byte(`"tokens": null`)) {
		t.Errorf("prompt JSON: %s", b)
	}
}

func TestStats(t *testing.T) {
	if got := quantile([]float64{4, 1, 3, 2}, 0.1); math.Abs(float64(got)-1.3) > 1e-12 {
		t.Errorf("quantile 0.1 = %v, want 1.3 (torch's linear interpolation)", got)
	}
	m := loadMetrics([]int{3, 0, 2, 1})
	want := map[string]float64{
		"mean": 1.5, "std": math.Sqrt(5.0 / 3), "gini": 10.0 / 24,
		"entropy": -(math.Log(1.0/6)/6 + math.Log(1.0/3)/3 + math.Log(0.5)/2),
	}
	got := map[string]float64{"mean": float64(m.Mean), "std": float64(m.Std), "gini": float64(m.Gini), "entropy": float64(m.EntropyNats)}
	for k, w := range want {
		if math.Abs(got[k]-w) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	if m.Routes != 6 || m.UsedExperts != 3 || m.ZeroExperts != 1 || m.Max != 3 || m.P50 != 1.5 {
		t.Errorf("%+v", m)
	}
	b, err := json.Marshal(struct{ A, B Num }{Num(math.NaN()), Num(math.Inf(1))})
	if err != nil || string(b) != `{"A":null,"B":null}` {
		t.Errorf("non-finite numbers: %s, %v", b, err)
	}
}

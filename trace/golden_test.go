package trace_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/trace"
	_ "github.com/dsfs/dsfs/trace/deepseek2"
	_ "github.com/dsfs/dsfs/trace/deepseek4"
	_ "github.com/dsfs/dsfs/trace/deepseek41"
)

// goldenArray is an array of a reference checkpoint's golden.json.
type goldenArray struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Data  []byte `json:"data"`
}

// TestGoldenFamilies traces every reference checkpoint of testdata/trace
// through the family registered for its config, the way trace/ does
// (trace.Lookup, Family.Open, Model.Trace, Tracer.ReadActivation), with
// its golden sequences as two prompts run in one batch, and compares each
// activation the files serve with DeepSeek's reference: values to within
// tol of the tensor's largest magnitude, routes as the same experts with
// the same weights. The family packages test the rest of their records.
func TestGoldenFamilies(t *testing.T) {
	v2 := map[string][]string{
		"attn_out": {"attn_out"}, "ffn_out": {"ffn_out"}, "hidden_out": {"hidden_out"},
		"kv_latent": {"kv_latent"}, "k_pe": {"k_pe"}, "topk_ids": {"topk_ids"}, "topk_weights": {"topk_weights"},
	}
	v4 := map[string][]string{
		"stream_out": {"stream_out"}, "attn_out": {"attn_out"}, "ffn_out": {"ffn_out"},
		"topk_ids": {"route", "ids"}, "topk_weights": {"route", "weights"}, "logits": {"logits"},
	}
	v41 := maps(v4, map[string][]string{"pre_mix": {"pre_mix_out"}})
	for _, tt := range []struct {
		name   string
		family checkpoint.Family
		modes  []string // precisions the golden holds; "" for none
		golden map[string][]string
		tol    float64
	}{
		{"v2lite-tiny", checkpoint.DeepSeekV2, []string{""}, v2, 1e-4},
		{"v3-tiny", checkpoint.DeepSeekV3, []string{""}, v2, 1e-4},
		{"v4-tiny", checkpoint.DeepSeekV4, []string{"a8", "fp32"}, v4, 1e-5},
		{"v41-tiny", checkpoint.DeepSeekV41, []string{"a8", "fp32"}, v41, 1e-5},
	} {
		for _, mode := range tt.modes {
			t.Run(tt.name+"/"+cmp.Or(mode, "fp32"), func(t *testing.T) {
				var g struct {
					Sequences []map[string]json.RawMessage `json:"sequences"`
				}
				dir := testdata.TraceGolden(t, tt.name, &g)
				cat, err := checkpoint.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer cat.Close()
				if cat.Config.Family != tt.family {
					t.Fatalf("family %q, want %q", cat.Config.Family, tt.family)
				}
				tok, err := cat.Tokenizer()
				if err != nil {
					t.Fatal(err)
				}
				m, err := trace.Lookup(tt.family).Open(cat, tok)
				if err != nil {
					t.Fatal(err)
				}
				var prompts []trace.Prompt
				layers := make([][]map[string]json.RawMessage, len(g.Sequences))
				finals := make([]map[string]json.RawMessage, len(g.Sequences))
				for i, s := range g.Sequences {
					var ids []int
					decode(t, s["token_ids"], &ids)
					prompts = append(prompts, trace.Prompt{ID: "s" + string(rune('0'+i)), TokenIDs: ids})
					run := s
					if mode != "" {
						var modes map[string]map[string]json.RawMessage
						decode(t, s["modes"], &modes)
						run = modes[mode]
					}
					decode(t, run["layers"], &layers[i])
					if run["final"] != nil {
						decode(t, run["final"], &finals[i])
					}
				}
				if err := trace.Encode(prompts, nil, m.Vocab()); err != nil {
					t.Fatal(err)
				}
				tr, err := m.Trace(prompts, trace.Options{Precision: mode})
				if err != nil {
					t.Fatal(err)
				}
				checked := 0
				for l := range tr.Layers() {
					for _, a := range tr.Activations(l) {
						if path := tt.golden[a.Kind]; path != nil {
							compareGolden(t, tr, l, a, goldenAt(t, layers[a.Prompt][l], path), tt.tol)
							checked++
						}
					}
				}
				for _, a := range tr.LogitActivations() {
					compareGolden(t, tr, -1, a, goldenAt(t, finals[a.Prompt], tt.golden["logits"]), tt.tol)
					checked++
				}
				if checked == 0 {
					t.Fatal("no activation compared")
				}
			})
		}
	}
}

func maps(a, b map[string][]string) map[string][]string {
	out := make(map[string][]string, len(a)+len(b))
	for _, m := range []map[string][]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func decode(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

// goldenAt is the array at path in a golden object.
func goldenAt(t *testing.T, obj map[string]json.RawMessage, path []string) goldenArray {
	t.Helper()
	for _, k := range path[:len(path)-1] {
		var next map[string]json.RawMessage
		decode(t, obj[k], &next)
		obj = next
	}
	var a goldenArray
	decode(t, obj[path[len(path)-1]], &a)
	return a
}

// compareGolden reads activation a of layer l and compares it with want.
func compareGolden(t *testing.T, tr trace.Tracer, l int, a trace.Activation, want goldenArray, tol float64) {
	t.Helper()
	got := make([]byte, int64(a.Rows())*a.RowBytes())
	if err := tr.ReadActivation(context.Background(), l, a, 0, a.Rows(), got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.Data) {
		t.Fatalf("layer %d %s: %d bytes, the golden %d", l, a.Name, len(got), len(want.Data))
	}
	if a.Kind == "topk_ids" || a.Kind == "topk_weights" {
		// Routes compare row by row as sets, whatever the order a row
		// lists its experts in: the same experts, the same weights.
		got, want.Data = sortedRows(got, int(a.Shape[1]), a.Kind == "topk_ids"), sortedRows(want.Data, int(a.Shape[1]), a.Kind == "topk_ids")
	}
	switch {
	case a.Kind == "topk_ids" || strings.HasPrefix(want.DType, "int"):
		if !slices.Equal(got, want.Data) {
			t.Errorf("layer %d %s differs from the golden", l, a.Name)
		}
	default:
		g, w := floats(got), floats(want.Data)
		var d, mx float64
		for i := range w {
			d = max(d, math.Abs(float64(g[i]-w[i])))
			mx = max(mx, math.Abs(float64(w[i])))
		}
		if d > tol*mx {
			t.Errorf("layer %d %s: max|Δ| %.3g, over %g of the largest magnitude %.3g", l, a.Name, d, tol, mx)
		}
	}
}

func floats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// sortedRows sorts each row of k little-endian int32 (ints) or float32
// values.
func sortedRows(b []byte, k int, ints bool) []byte {
	out := make([]byte, len(b))
	for r := 0; r < len(b); r += 4 * k {
		if ints {
			v := make([]int32, k)
			for i := range v {
				v[i] = int32(binary.LittleEndian.Uint32(b[r+4*i:]))
			}
			slices.Sort(v)
			for i, x := range v {
				binary.LittleEndian.PutUint32(out[r+4*i:], uint32(x))
			}
			continue
		}
		v := floats(b[r : r+4*k])
		slices.Sort(v)
		for i, x := range v {
			binary.LittleEndian.PutUint32(out[r+4*i:], math.Float32bits(x))
		}
	}
	return out
}

// Package v4tiny opens the tiny DeepSeek-V4 and V4.1 reference
// checkpoints of testdata/trace (v4-tiny, v41-tiny) as trace/v4 models,
// for the tests of the packages that run them.
package v4tiny

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// Open opens the V4 checkpoint in dir with its inference/config.json; its
// catalog closes when tb ends.
func Open(tb testing.TB, dir string) *v4.Model {
	tb.Helper()
	cat, inf := open(tb, dir)
	m, err := v4.Open(cat, inf)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Open41 opens the V4.1 checkpoint in dir with its inference/config.json
// and tokenizer.json; its catalog closes when tb ends.
func Open41(tb testing.TB, dir string) *v4.Model41 {
	tb.Helper()
	cat, inf := open(tb, dir)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := v4.Open41(cat, inf, tok)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func open(tb testing.TB, dir string) (*checkpoint.Catalog, []byte) {
	tb.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cat.Close() })
	inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil {
		tb.Fatal(err)
	}
	return cat, inf
}

// Array is a golden array of testdata/trace: its shape and little-endian
// values.
type Array struct {
	Shape []int  `json:"shape"`
	Data  []byte `json:"data"`
}

// TwoPrompts is two golden sequences as prompts s0 and s1 of a vocabulary
// of vocab ids.
func TwoPrompts(tb testing.TB, s0, s1 []int, vocab int) []trace.Prompt {
	tb.Helper()
	prompts := []trace.Prompt{{ID: "s0", TokenIDs: s0}, {ID: "s1", TokenIDs: s1}}
	if err := trace.Encode(prompts, nil, vocab); err != nil {
		tb.Fatal(err)
	}
	return prompts
}

// ReadActivation reads a whole activation of layer l (-1: the logits) as
// raw little-endian bytes.
func ReadActivation(tb testing.TB, tr trace.Tracer, l int, a trace.Activation) []byte {
	tb.Helper()
	b := make([]byte, int64(a.Rows())*a.RowBytes())
	if err := tr.ReadActivation(context.Background(), l, a, 0, a.Rows(), b); err != nil {
		tb.Fatal(err)
	}
	return b
}

// F32s reads little-endian float32 values.
func F32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// I32s reads little-endian int32 values.
func I32s(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Within fails tb unless got is want (little-endian float32) to within
// 1e-5 of want's largest magnitude.
func Within(tb testing.TB, what string, got []float32, want []byte) {
	tb.Helper()
	w := F32s(want)
	if len(got) != len(w) {
		tb.Fatalf("%s: %d values, want %d", what, len(got), len(w))
	}
	var d, mx float64
	for i := range w {
		d = max(d, math.Abs(float64(got[i]-w[i])))
		mx = max(mx, math.Abs(float64(w[i])))
	}
	if d > 1e-5*mx {
		tb.Errorf("%s: max|Δ|/max %.3g exceeds 1e-5", what, d/mx)
	}
}

// CheckCalibration compares what tr's Calibrate records of every layer's
// routed experts with what the golden chain of the reference checkpoint
// in dir (its sequences traced together, in precision mode) gives: per
// expert, the largest magnitude of ffn_in over the tokens routed to it
// (In) and of routed_w2_in over their slots (Mid), to within 1e-4 of the
// larger.
func CheckCalibration(tb testing.TB, tr trace.Calibrator, dir, mode string) {
	tb.Helper()
	var g struct {
		Sequences []struct {
			Modes map[string]struct {
				Layers []struct {
					FFNIn      Array `json:"ffn_in"`
					RoutedW2In Array `json:"routed_w2_in"`
					Route      struct {
						IDs Array `json:"ids"`
					} `json:"route"`
				} `json:"layers"`
			} `json:"modes"`
		} `json:"sequences"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		tb.Fatal(err)
	}
	got, err := tr.Calibrate(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if len(got) == 0 {
		tb.Fatal("Calibrate recorded no layer")
	}
	for _, e := range got {
		in, mid := make([]float32, len(e.In)), make([]float32, len(e.Mid))
		for _, s := range g.Sequences {
			gl := s.Modes[mode].Layers[e.Layer]
			x, w2, ids := F32s(gl.FFNIn.Data), F32s(gl.RoutedW2In.Data), I32s(gl.Route.IDs.Data)
			k, d, inter := gl.Route.IDs.Shape[1], gl.FFNIn.Shape[1], gl.RoutedW2In.Shape[2]
			for t := range gl.Route.IDs.Shape[0] {
				for j := range k {
					ex := ids[t*k+j]
					for _, v := range x[t*d : (t+1)*d] {
						in[ex] = max(in[ex], float32(math.Abs(float64(v))))
					}
					for _, v := range w2[(t*k+j)*inter : (t*k+j+1)*inter] {
						mid[ex] = max(mid[ex], float32(math.Abs(float64(v))))
					}
				}
			}
		}
		for ex := range in {
			for _, c := range []struct {
				what      string
				got, want float32
			}{{"in", e.In[ex], in[ex]}, {"mid", e.Mid[ex], mid[ex]}} {
				if math.Abs(float64(c.got-c.want)) > 1e-4*float64(max(c.got, c.want)) || (c.got == 0) != (c.want == 0) {
					tb.Errorf("layer %d expert %d: %s amax %g, the golden chain gives %g", e.Layer, ex, c.what, c.got, c.want)
				}
			}
		}
	}
}

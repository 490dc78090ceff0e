package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
)

// v4GoldenSeq is one sequence of testdata/trace/v4-tiny/golden.json.
type v4GoldenSeq struct {
	TokenIDs []int `json:"token_ids"`
	Modes    map[string]struct {
		Layers []map[string]json.RawMessage `json:"layers"`
		Final  struct {
			Logits goldenArray `json:"logits"`
		} `json:"final"`
	} `json:"modes"`
}

// compareV4 is the README-v4 tolerance: max |Δ| ≤ 1e-5 × the golden's
// largest magnitude.
func compareV4(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, worst float64
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if !(worst <= 1e-5*scale) {
		t.Errorf("%s: max |Δ|/max %.3g exceeds 1e-5", what, worst/scale)
	}
}

// v4GoldenPrompts reads testdata/trace/<name>/golden.json and writes its
// sequences as the token-id prompts seq0, seq1, ...; it returns the
// checkpoint's directory, the sequences and the prompts file.
func v4GoldenPrompts(t *testing.T, name string) (dir string, seqs []v4GoldenSeq, pfile string) {
	t.Helper()
	var g struct {
		Sequences []v4GoldenSeq `json:"sequences"`
	}
	dir = testdata.TraceGolden(t, name, &g)
	var prompts []map[string]any
	for i, s := range g.Sequences {
		prompts = append(prompts, map[string]any{"id": fmt.Sprintf("seq%d", i), "label": "golden", "token_ids": s.TokenIDs})
	}
	return dir, g.Sequences, writePrompts(t, prompts)
}

// v4LayerFile is one prompt's tensors in a mounted layers/NN.safetensors.
type v4LayerFile struct {
	t      *testing.T
	l, seq int
	got    map[string]readTensor
}

// tensor is the prompt's tensor of kind, which must be a dt of shape.
func (f v4LayerFile) tensor(kind string, dt safetensors.DType, shape ...int64) []byte {
	f.t.Helper()
	name := fmt.Sprintf("seq%d.%s", f.seq, kind)
	ts, ok := f.got[name]
	if !ok {
		f.t.Fatalf("layer %d: no tensor %s", f.l, name)
	}
	if ts.meta.DType != dt || !slices.Equal(ts.meta.Shape, shape) {
		f.t.Fatalf("layer %d: %s is %s %v, want %s %v", f.l, name, ts.meta.DType, ts.meta.Shape, dt, shape)
	}
	return ts.data
}

// golden is the golden array raw of the layer's tensor what.
func (f v4LayerFile) golden(raw json.RawMessage, what string) *goldenArray {
	f.t.Helper()
	var a goldenArray
	if err := json.Unmarshal(raw, &a); err != nil {
		f.t.Fatalf("golden layer %d %s: %v", f.l, what, err)
	}
	return &a
}

// routes compares the prompt's topk_ids and topk_weights [T, 4] with the
// golden layer's route.
func (f v4LayerFile) routes(where string, T int64, golden json.RawMessage) {
	f.t.Helper()
	var route struct {
		IDs     goldenArray `json:"ids"`
		Weights goldenArray `json:"weights"`
	}
	if err := json.Unmarshal(golden, &route); err != nil {
		f.t.Fatal(err)
	}
	compareRoutes(f.t, where, f.tensor("topk_ids", safetensors.I32, T, 4), f.tensor("topk_weights", safetensors.F32, T, 4), route.IDs.Data, route.Weights.f32(), 4)
}

// compareV4Logits compares the mounted logits.safetensors, [T, vocab] a
// prompt, with the golden logits of mode.
func compareV4Logits(t *testing.T, m *mount, seqs []v4GoldenSeq, mode string, vocab int64) {
	t.Helper()
	logits := readSafetensors(t, m.path("trace", "logits.safetensors"))
	for i, s := range seqs {
		ts := logits[fmt.Sprintf("seq%d.logits", i)]
		if !slices.Equal(ts.meta.Shape, []int64{int64(len(s.TokenIDs)), vocab}) {
			t.Fatalf("seq%d.logits shape %v", i, ts.meta.Shape)
		}
		want := s.Modes[mode].Final.Logits
		compareV4(t, fmt.Sprintf("seq%d logits", i), (&goldenArray{Data: ts.data}).f32(), want.f32())
	}
}

// TestTraceV4Golden mounts the DeepSeek-V4 reference checkpoint with its
// two golden sequences as token-id prompts, in both precisions, and
// compares what the mounted layer files and logits.safetensors hold with
// DeepSeek's model.py: every float tensor within 1e-5 of its largest
// magnitude, routes and indexer picks identical. Reading the last layer
// first runs the five layers once; the logits then need no forward.
func TestTraceV4Golden(t *testing.T) {
	dir, seqs, pfile := v4GoldenPrompts(t, "v4-tiny")
	for _, mode := range []string{"a8", "fp32"} {
		t.Run(mode, func(t *testing.T) {
			m := startMount(t, dir, "--views", "trace", "--device", "cpu", "--trace-prompts", pfile, "--trace-precision", mode)
			if _, err := os.Stat(m.path("trace", "ERROR.txt")); !os.IsNotExist(err) {
				t.Fatalf("trace/ERROR.txt: %v", err)
			}
			for step, l := range []int{4, 0, 1, 2, 3} {
				got := readSafetensors(t, m.path("trace", "layers", fmt.Sprintf("%02d.safetensors", l)))
				if step == 0 {
					if n := layerForwards(t, m); n != 5 {
						t.Fatalf("reading layer 4 ran %d layer forwards, want 5\n%s", n, m.log)
					}
				}
				for i, s := range seqs {
					gl := s.Modes[mode].Layers[l]
					f := v4LayerFile{t: t, l: l, seq: i, got: got}
					T := int64(len(s.TokenIDs))
					for _, kind := range []string{"attn_out", "ffn_out"} {
						compareV4(t, fmt.Sprintf("layer %d seq%d %s", l, i, kind), (&goldenArray{Data: f.tensor(kind, safetensors.F32, T, 128)}).f32(), f.golden(gl[kind], kind).f32())
					}
					compareV4(t, fmt.Sprintf("layer %d seq%d stream_out", l, i), (&goldenArray{Data: f.tensor("stream_out", safetensors.F32, T, 4, 128)}).f32(), f.golden(gl["stream_out"], "stream_out").f32())
					if _, ok := gl["compressed_kv"]; ok {
						want := f.golden(gl["compressed_kv"], "compressed_kv")
						compareV4(t, fmt.Sprintf("layer %d seq%d compressed_kv", l, i), (&goldenArray{Data: f.tensor("compressed_kv", safetensors.F32, int64(want.Shape[0]), 128)}).f32(), want.f32())
					}
					if raw, ok := gl["indexer"]; ok {
						var ix struct {
							TopK goldenArray `json:"topk"`
						}
						if err := json.Unmarshal(raw, &ix); err != nil {
							t.Fatal(err)
						}
						k := ix.TopK.Shape[1]
						b := f.tensor("indexer_topk", safetensors.I32, T, int64(k))
						for r := range int(T) {
							gotRow := slices.Clone(int32s(b)[r*k : (r+1)*k])
							wantRow := slices.Clone(int32s(ix.TopK.Data)[r*k : (r+1)*k])
							slices.Sort(wantRow)
							// The file lists picks ascending with -1 last.
							valid := slices.DeleteFunc(slices.Clone(wantRow), func(v int32) bool { return v < 0 })
							for len(valid) < k {
								valid = append(valid, -1)
							}
							if !slices.Equal(gotRow, valid) {
								t.Errorf("layer %d seq%d token %d: indexer picks %v, want %v", l, i, r, gotRow, valid)
							}
						}
					}
					f.routes(fmt.Sprintf("layer %d seq%d", l, i), T, gl["route"])
				}
			}
			compareV4Logits(t, m, seqs, mode, 512)
			var rec struct {
				Attention string `json:"attention"`
				Precision string `json:"precision"`
				Indexer   []struct {
					Tokens []struct {
						Picks []int32 `json:"picks"`
					} `json:"tokens"`
				} `json:"indexer"`
			}
			b, err := os.ReadFile(m.path("trace", "layers", "02.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rec); err != nil || rec.Attention != "csa" || rec.Precision != mode || len(rec.Indexer) != 2 {
				t.Fatalf("layers/02.json (%v): %.400s", err, b)
			}
			if n := layerForwards(t, m); n != 5+4 {
				// Layers 0-3 were re-run once each after layer 4 (the
				// tracer keeps the last two layers' activations).
				t.Errorf("%d layer forwards, want 9", n)
			}
		})
	}
}

func int32s(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return v
}

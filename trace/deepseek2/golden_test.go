package deepseek2

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/trace/backend"
)

// array is a golden.json array.
type array struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Data  []byte `json:"data"` // base64 in the file
	f32   []float32
	i32   []int32
}

func (a *array) decode(t *testing.T) {
	t.Helper()
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	if len(a.Data) != 4*n {
		t.Fatalf("golden array %v: %d bytes", a.Shape, len(a.Data))
	}
	switch a.DType {
	case "float32":
		a.f32 = make([]float32, n)
		for i := range a.f32 {
			a.f32[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
		}
	case "int32":
		a.i32 = make([]int32, n)
		for i := range a.i32 {
			a.i32[i] = int32(binary.LittleEndian.Uint32(a.Data[4*i:]))
		}
	default:
		t.Fatalf("golden dtype %q", a.DType)
	}
}

type goldenLayer struct {
	Layer       int    `json:"layer"`
	Kind        string `json:"kind"`
	AttnOut     *array `json:"attn_out"`
	FFNOut      *array `json:"ffn_out"`
	HiddenOut   *array `json:"hidden_out"`
	KVAOut      *array `json:"kv_a_out"`
	KVLatent    *array `json:"kv_latent"`
	KPE         *array `json:"k_pe"`
	TopKIDs     *array `json:"topk_ids"`
	TopKWeights *array `json:"topk_weights"`
	RouteMargin *array `json:"route_margin"`
}

type golden struct {
	Derived struct {
		SoftmaxScale float64 `json:"softmax_scale"`
		RopeInvFreq  *array  `json:"rope_inv_freq"`
	} `json:"derived"`
	Sequences []struct {
		Length   int            `json:"length"`
		TokenIDs []int          `json:"token_ids"`
		Embed    *array         `json:"embed"`
		Layers   []*goldenLayer `json:"layers"`
	} `json:"sequences"`
}

// goldenModels are the reference checkpoints of testdata/trace.
var goldenModels = []string{"v2lite-tiny", "v3-tiny"}

func loadGolden(t *testing.T, name string) (*Model, *golden) {
	t.Helper()
	dir := filepath.Join(testdata.Dir(t), "trace", name)
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	g.Derived.RopeInvFreq.decode(t)
	for _, s := range g.Sequences {
		s.Embed.decode(t)
		for _, l := range s.Layers {
			for _, a := range []*array{l.AttnOut, l.FFNOut, l.HiddenOut, l.KVAOut, l.KVLatent, l.KPE, l.TopKIDs, l.TopKWeights, l.RouteMargin} {
				if a != nil {
					a.decode(t)
				}
			}
		}
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	m, err := Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	return m, &g
}

// closeTo fails unless got is within 1e-4 of want's largest magnitude,
// element by element.
func closeTo(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, worst float64
	at := 0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		if d := math.Abs(float64(got[i] - want[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if !(worst <= 1e-4*scale) {
		t.Errorf("%s: max |Δ| %.3g at %d (got %g, want %g) exceeds 1e-4 × max %.3g", what, worst, at, got[at], want[at], scale)
	}
}

func TestDerived(t *testing.T) {
	for _, name := range goldenModels {
		t.Run(name, func(t *testing.T) {
			m, g := loadGolden(t, name)
			if got, want := m.Config.SoftmaxScale(), g.Derived.SoftmaxScale; math.Abs(got-want) > 1e-7*want {
				t.Errorf("softmax scale %.9g, want %.9g", got, want)
			}
			freq := m.Config.InvFreq()
			for i, want := range g.Derived.RopeInvFreq.f32 {
				if math.Abs(float64(freq[i]-want)) > 1e-7*float64(want) {
					t.Errorf("inv_freq[%d] = %g, want %g", i, freq[i], want)
				}
			}
		})
	}
}

// TestGolden runs every layer on both golden sequences at once, fed the
// golden input of that layer, and compares every recorded activation and
// route with DeepSeek's reference; then it runs the whole chain from the
// embeddings and compares again.
func TestGolden(t *testing.T) {
	for _, name := range goldenModels {
		t.Run(name, func(t *testing.T) {
			m, g := loadGolden(t, name)
			var lens, ids []int
			var embed []float32
			for _, s := range g.Sequences {
				lens = append(lens, s.Length)
				ids = append(ids, s.TokenIDs...)
				embed = append(embed, s.Embed.f32...)
			}
			rows, err := m.EmbedRows(ids)
			if err != nil {
				t.Fatal(err)
			}
			closeTo(t, "embed", rows, embed)
			// concat joins one golden tensor over the sequences.
			concat := func(l int, pick func(*goldenLayer) *array) ([]float32, []int32) {
				var f []float32
				var i []int32
				for _, s := range g.Sequences {
					a := pick(s.Layers[l])
					f, i = append(f, a.f32...), append(i, a.i32...)
				}
				return f, i
			}
			b := backend.NewCPU()
			for _, chain := range []bool{false, true} {
				h := embed
				for l := range m.Config.Layers {
					in := h
					if !chain && l > 0 {
						in, _ = concat(l-1, func(gl *goldenLayer) *array { return gl.HiddenOut })
					}
					out, err := m.Forward(context.Background(), b, l, in, lens)
					if err != nil {
						t.Fatal(err)
					}
					h = out.HiddenOut
					mode := "per layer"
					if chain {
						mode = "chain"
					}
					where := func(s string) string { return fmt.Sprintf("%s: layer %d: %s", mode, l, s) }
					for _, c := range []struct {
						name string
						got  []float32
						pick func(*goldenLayer) *array
					}{
						{"attn_out", out.AttnOut, func(gl *goldenLayer) *array { return gl.AttnOut }},
						{"ffn_out", out.FFNOut, func(gl *goldenLayer) *array { return gl.FFNOut }},
						{"hidden_out", out.HiddenOut, func(gl *goldenLayer) *array { return gl.HiddenOut }},
						{"kv_a_out", out.KVA, func(gl *goldenLayer) *array { return gl.KVAOut }},
						{"kv_latent", out.KVLatent, func(gl *goldenLayer) *array { return gl.KVLatent }},
						{"k_pe", out.KPE, func(gl *goldenLayer) *array { return gl.KPE }},
					} {
						want, _ := concat(l, c.pick)
						closeTo(t, where(c.name), c.got, want)
					}
					if g.Sequences[0].Layers[l].Kind != "moe" {
						if out.Routes != nil {
							t.Errorf("%s routes on a dense layer", where(""))
						}
						continue
					}
					_, wantIDs := concat(l, func(gl *goldenLayer) *array { return gl.TopKIDs })
					wantW, _ := concat(l, func(gl *goldenLayer) *array { return gl.TopKWeights })
					wantMargin, _ := concat(l, func(gl *goldenLayer) *array { return gl.RouteMargin })
					checkRoutes(t, where("routes"), out.Routes, wantIDs, wantW, wantMargin)
				}
			}
		})
	}
}

// checkRoutes compares expert sets per token exactly, and weights and
// margins within tolerance; the order must be the reference's too
// (descending selection score).
func checkRoutes(t *testing.T, what string, r *Routes, ids []int32, w, margin []float32) {
	t.Helper()
	if r == nil {
		t.Fatalf("%s: no routes", what)
	}
	if !slices.Equal(r.IDs, ids) {
		k := r.K
		for tok := range len(ids) / k {
			a := slices.Clone(r.IDs[tok*k : (tok+1)*k])
			b := slices.Clone(ids[tok*k : (tok+1)*k])
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) {
				t.Errorf("%s: token %d experts %v, want %v", what, tok, r.IDs[tok*k:(tok+1)*k], ids[tok*k:(tok+1)*k])
			}
		}
		t.Errorf("%s: expert order differs from the reference", what)
		return
	}
	closeTo(t, what+" weights", r.Weights, w)
	closeTo(t, what+" margins", r.Margin, margin)
}

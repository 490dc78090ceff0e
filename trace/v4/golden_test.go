package v4

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
)

// tolerance is testdata/trace/README-v4's: every float tensor within
// 1e-5 of the golden's largest magnitude (two float32 evaluations of the
// reference differ by 1e-7 to about 4e-6; one flipped FP8/FP4 code moves
// a sublayer output by 1e-4 or more).
const tolerance = 1e-5

// array is a golden.json array.
type array struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Data  []byte `json:"data"`
}

func (a *array) f32(t *testing.T) []float32 {
	t.Helper()
	if a == nil {
		t.Fatal("golden array missing")
	}
	if a.DType != "float32" {
		t.Fatalf("golden array %v is %s, want float32", a.Shape, a.DType)
	}
	out := make([]float32, len(a.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out
}

func (a *array) i32(t *testing.T) []int32 {
	t.Helper()
	if a == nil || a.DType != "int32" {
		t.Fatalf("golden int32 array missing or not int32")
	}
	out := make([]int32, len(a.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out
}

type goldenHC struct {
	Pre  *array `json:"pre"`
	Post *array `json:"post"`
	Comb *array `json:"comb"`
}

type goldenLayer struct {
	Layer        int      `json:"layer"`
	StreamIn     *array   `json:"stream_in"`
	HCAttn       goldenHC `json:"hc_attn"`
	AttnIn       *array   `json:"attn_in"`
	QR           *array   `json:"qr"`
	WindowKV     *array   `json:"window_kv"`
	CompressedKV *array   `json:"compressed_kv"`
	AttnTopK     *array   `json:"attn_topk_idxs"`
	Indexer      *struct {
		IndexK *array `json:"index_k"`
		Scores *array `json:"scores"`
		K      int    `json:"k"`
		TopK   *array `json:"topk"`
	} `json:"indexer"`
	AttnOut   *array   `json:"attn_out"`
	StreamMid *array   `json:"stream_mid"`
	HCFFN     goldenHC `json:"hc_ffn"`
	FFNIn     *array   `json:"ffn_in"`
	Route     struct {
		IDs     *array `json:"ids"`
		Weights *array `json:"weights"`
		Scores  *array `json:"scores"`
	} `json:"route"`
	FFNOut    *array `json:"ffn_out"`
	StreamOut *array `json:"stream_out"`
}

type goldenMode struct {
	Embed  *array         `json:"embed"`
	Layers []*goldenLayer `json:"layers"`
	Final  struct {
		Pre    *array `json:"hc_head_pre"`
		Hidden *array `json:"hidden"`
		Norm   *array `json:"norm"`
		Logits *array `json:"logits"`
	} `json:"final"`
}

type golden struct {
	Derived struct {
		SoftmaxScale float64 `json:"softmax_scale"`
		RopeInvFreq  struct {
			SWA        *array `json:"sliding_window_layers"`
			Compressed *array `json:"compressed_layers"`
		} `json:"rope_inv_freq"`
		Layers []struct {
			Layer         int    `json:"layer"`
			CompressRatio int    `json:"compress_ratio"`
			Kind          string `json:"kind"`
			HashRouted    bool   `json:"hash_routed"`
		} `json:"layers"`
	} `json:"derived"`
	Sequences []struct {
		Length   int                    `json:"length"`
		TokenIDs []int                  `json:"token_ids"`
		Modes    map[string]*goldenMode `json:"modes"`
	} `json:"sequences"`
}

var goldenCache struct {
	m *Model
	g *golden
}

// loadGolden opens testdata/trace/v4-tiny once per test binary.
func loadGolden(t *testing.T) (*Model, *golden) {
	t.Helper()
	if goldenCache.m != nil {
		return goldenCache.m, goldenCache.g
	}
	g := new(golden)
	cat, inf := openCatalog(t, testdata.TraceGolden(t, "v4-tiny", g))
	m, err := Open(cat, inf)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, m.Config.Layers, m.Problems, m.HeadProblems())
	goldenCache.m, goldenCache.g = m, g
	return m, g
}

// openCatalog opens the checkpoint in dir and reads its
// inference/config.json. The catalog stays open: the models made of it
// are shared by the tests of the binary.
func openCatalog(t testing.TB, dir string) (*checkpoint.Catalog, []byte) {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return cat, inf
}

// mustRun fails t when any of a model's layers or its head has a
// problem.
func mustRun(t testing.TB, layers int, problems func(int) []string, head []string) {
	t.Helper()
	for l := range layers {
		if p := problems(l); p != nil {
			t.Fatalf("layer %d: %v", l, p)
		}
	}
	if head != nil {
		t.Fatalf("head: %v", head)
	}
}

// relDiff is max|got - want| / max|want|.
func relDiff(got, want []float32) float64 {
	var d, mx float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		mx = max(mx, math.Abs(float64(want[i])))
	}
	if mx == 0 {
		return d
	}
	return d / mx
}

// comparer checks tensors against the golden and keeps the worst ratio.
type comparer struct {
	t     *testing.T
	where string
	worst float64
}

func (c *comparer) close(what string, got []float32, want *array) {
	c.t.Helper()
	w := want.f32(c.t)
	if len(got) != len(w) {
		c.t.Errorf("%s %s: %d values, want %d", c.where, what, len(got), len(w))
		return
	}
	r := relDiff(got, w)
	c.worst = max(c.worst, r)
	if r > tolerance || math.IsNaN(r) {
		c.t.Errorf("%s %s: max|Δ|/max %.3g exceeds %g", c.where, what, r, tolerance)
	}
}

// closeInf compares scores whose infinities must match exactly and whose
// finite values must be within the tolerance.
func (c *comparer) closeInf(what string, got []float32, want *array) {
	c.t.Helper()
	w := want.f32(c.t)
	if len(got) != len(w) {
		c.t.Errorf("%s %s: %d values, want %d", c.where, what, len(got), len(w))
		return
	}
	g := slices.Clone(got)
	for i := range w {
		if math.IsInf(float64(w[i]), 0) || math.IsInf(float64(g[i]), 0) {
			if w[i] != g[i] {
				c.t.Errorf("%s %s[%d]: got %g, want %g", c.where, what, i, g[i], w[i])
			}
			w[i], g[i] = 0, 0
		}
	}
	r := relDiff(g, w)
	c.worst = max(c.worst, r)
	if r > tolerance {
		c.t.Errorf("%s %s: max|Δ|/max %.3g exceeds %g", c.where, what, r, tolerance)
	}
}

func (c *comparer) hc(site string, got HC, want goldenHC) {
	c.t.Helper()
	c.close(site+".pre", got.Pre, want.Pre)
	c.close(site+".post", got.Post, want.Post)
	c.close(site+".comb", got.Comb, want.Comb)
}

func (c *comparer) exact(what string, got []int32, want *array) {
	c.t.Helper()
	w := want.i32(c.t)
	if !slices.Equal(got, w) {
		c.t.Errorf("%s %s: got %v, want %v", c.where, what, got, w)
	}
}

// sameSets reports whether rows of k ids hold the same sets.
func sameSets(a, b []int32, k int) bool {
	if len(a) != len(b) {
		return false
	}
	for r := 0; r < len(a); r += k {
		x, y := slices.Clone(a[r:r+k]), slices.Clone(b[r:r+k])
		slices.Sort(x)
		slices.Sort(y)
		if !slices.Equal(x, y) {
			return false
		}
	}
	return true
}

// routes compares the experts each token chose, as sets, and their
// weights with g's.
func (c *comparer) routes(got Routes, g *goldenLayer) {
	c.t.Helper()
	k := got.K
	wantIDs := g.Route.IDs.i32(c.t)
	if !sameSets(got.IDs, wantIDs, k) {
		c.t.Errorf("%s routes: got %v, want %v", c.where, got.IDs, wantIDs)
		return
	}
	// Weights go with their ids: compare in the golden's order.
	wantW := g.Route.Weights.f32(c.t)
	w := make([]float32, len(wantW))
	for r := 0; r < len(wantIDs); r += k {
		for j, id := range wantIDs[r : r+k] {
			w[r+j] = got.Weights[r+slices.Index(got.IDs[r:r+k], id)]
		}
	}
	c.close("route.weights", w, g.Route.Weights)
}

// checkLayer compares one layer's output with its golden record; it
// returns the worst ratio over the layer's float tensors.
func checkLayer(c *comparer, out *LayerOutput, g *goldenLayer) {
	c.t.Helper()
	c.hc("hc_attn", out.HCAttn, g.HCAttn)
	c.close("attn_in", out.AttnIn, g.AttnIn)
	c.close("qr", out.QR, g.QR)
	c.close("window_kv", out.WindowKV, g.WindowKV)
	sa := out.Seqs[0]
	c.exact("attn_topk_idxs", sa.TopK, g.AttnTopK)
	if g.CompressedKV != nil {
		c.close("compressed_kv", sa.Compressed, g.CompressedKV)
	} else if sa.Compressed != nil {
		c.t.Errorf("%s: compressed KV in a sliding-window layer", c.where)
	}
	if g.Indexer != nil {
		c.close("indexer.index_k", sa.IndexKeys, g.Indexer.IndexK)
		if sa.IndexK != g.Indexer.K {
			c.t.Errorf("%s indexer k %d, want %d", c.where, sa.IndexK, g.Indexer.K)
		}
		c.exact("indexer.topk", sa.IndexTopK, g.Indexer.TopK)
		c.closeInf("indexer.scores", sa.IndexScores, g.Indexer.Scores)
	}
	c.close("attn_out", out.AttnOut, g.AttnOut)
	c.close("stream_mid", out.StreamMid, g.StreamMid)
	c.hc("hc_ffn", out.HCFFN, g.HCFFN)
	c.close("ffn_in", out.FFNIn, g.FFNIn)
	c.routes(out.Routes, g)
	if g.Route.Scores != nil {
		c.close("route.scores", out.Routes.Scores, g.Route.Scores)
	}
	c.close("ffn_out", out.FFNOut, g.FFNOut)
	c.close("stream_out", out.StreamOut, g.StreamOut)
}

var modes = []Precision{FP32, A8}

// TestGoldenLayers runs every layer isolated on the golden stream entering
// it, per sequence and precision, and compares everything it records.
func TestGoldenLayers(t *testing.T) {
	m, g := loadGolden(t)
	for si, s := range g.Sequences {
		for _, p := range modes {
			gm := s.Modes[string(p)]
			for l, gl := range gm.Layers {
				t.Run(fmt.Sprintf("seq%d/%s/layer%d", si, p, l), func(t *testing.T) {
					out, err := m.Forward(context.Background(), l, gl.StreamIn.f32(t), [][]int{s.TokenIDs}, p)
					if err != nil {
						t.Fatal(err)
					}
					c := &comparer{t: t, where: fmt.Sprintf("seq %d %s layer %d", si, p, l)}
					checkLayer(c, out, gl)
					t.Logf("worst max|Δ|/max %.3g", c.worst)
				})
			}
		}
	}
}

// TestGoldenChain runs the whole model from the embedding to the logits
// per sequence and precision.
func TestGoldenChain(t *testing.T) {
	m, g := loadGolden(t)
	cfg := m.Config
	for si, s := range g.Sequences {
		for _, p := range modes {
			t.Run(fmt.Sprintf("seq%d/%s", si, p), func(t *testing.T) {
				gm := s.Modes[string(p)]
				c := &comparer{t: t}
				emb, err := m.EmbedRows(s.TokenIDs)
				if err != nil {
					t.Fatal(err)
				}
				c.where = "embed"
				c.close("embed", emb, gm.Embed)
				stream := cfg.InitialStream(emb)
				for l, gl := range gm.Layers {
					c.where = fmt.Sprintf("chained layer %d", l)
					c.close("stream_in", stream, gl.StreamIn)
					out, err := m.Forward(context.Background(), l, stream, [][]int{s.TokenIDs}, p)
					if err != nil {
						t.Fatal(err)
					}
					c.worst = 0
					checkLayer(c, out, gl)
					t.Logf("layer %d: worst max|Δ|/max %.3g", l, c.worst)
					stream = out.StreamOut
				}
				fin, err := m.Logits(context.Background(), stream)
				if err != nil {
					t.Fatal(err)
				}
				c.where, c.worst = "final", 0
				c.close("hc_head_pre", fin.Pre, gm.Final.Pre)
				c.close("hidden", fin.Hidden, gm.Final.Hidden)
				c.close("norm", fin.Norm, gm.Final.Norm)
				c.close("logits", fin.Logits, gm.Final.Logits)
				t.Logf("final: worst max|Δ|/max %.3g", c.worst)
			})
		}
	}
}

// TestBatchEqualsSingle checks that sequences run together give each
// sequence's own result: attention never crosses sequences.
func TestBatchEqualsSingle(t *testing.T) {
	m, g := loadGolden(t)
	for l := range m.Config.Layers {
		var stream []float32
		var seqs [][]int
		var single []*LayerOutput
		for _, s := range g.Sequences {
			in := s.Modes["a8"].Layers[l].StreamIn.f32(t)
			stream = append(stream, in...)
			seqs = append(seqs, s.TokenIDs)
			out, err := m.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, A8)
			if err != nil {
				t.Fatal(err)
			}
			single = append(single, out)
		}
		both, err := m.Forward(context.Background(), l, stream, seqs, A8)
		if err != nil {
			t.Fatal(err)
		}
		var want []float32
		for _, o := range single {
			want = append(want, o.StreamOut...)
		}
		if !slices.Equal(both.StreamOut, want) {
			t.Errorf("layer %d: batched stream differs from the sequences run alone (max|Δ|/max %.3g)", l, relDiff(both.StreamOut, want))
		}
		for i, o := range single {
			if !slices.Equal(both.Seqs[i].TopK, o.Seqs[0].TopK) {
				t.Errorf("layer %d sequence %d: batched attention indices differ", l, i)
			}
		}
	}
}

// TestDerived checks the rotary frequencies and layer roles against what
// model.py derived.
func TestDerived(t *testing.T) {
	m, g := loadGolden(t)
	cfg := m.Config
	for l, d := range g.Derived.Layers {
		if cfg.Ratio(l) != d.CompressRatio || string(cfg.Kind(l)) != d.Kind || cfg.HashRouted(l) != d.HashRouted {
			t.Errorf("layer %d: ratio %d kind %s hash %v, want %d %s %v", l, cfg.Ratio(l), cfg.Kind(l), cfg.HashRouted(l), d.CompressRatio, d.Kind, d.HashRouted)
		}
		want := g.Derived.RopeInvFreq.SWA
		if cfg.Ratio(l) > 0 {
			want = g.Derived.RopeInvFreq.Compressed
		}
		if r := relDiff(cfg.InvFreq(l), want.f32(t)); r > 1e-7 {
			t.Errorf("layer %d: rotary frequencies differ by %.3g", l, r)
		}
	}
	if s := 1 / math.Sqrt(float64(cfg.HeadDim)); math.Abs(s-g.Derived.SoftmaxScale) > 1e-12 {
		t.Errorf("softmax scale %g, want %g", s, g.Derived.SoftmaxScale)
	}
}

// TestPrecisionsDiffer shows that the golden comparison tells the two
// precisions apart: each layer run at one precision on the other's
// golden input misses that golden's outputs by far more than the
// tolerance, so a8 is no mere rounding of fp32.
func TestPrecisionsDiffer(t *testing.T) {
	m, g := loadGolden(t)
	s := g.Sequences[0]
	for l := range m.Config.Layers {
		for _, p := range modes {
			other := A8
			if p == A8 {
				other = FP32
			}
			gl := s.Modes[string(other)].Layers[l]
			out, err := m.Forward(context.Background(), l, gl.StreamIn.f32(t), [][]int{s.TokenIDs}, p)
			if err != nil {
				t.Fatal(err)
			}
			if r := relDiff(out.AttnOut, gl.AttnOut.f32(t)); r < 100*tolerance {
				t.Errorf("layer %d: %s attention on %s's input is within %.3g of %s's output", l, p, other, r, other)
			}
		}
	}
}

// TestForwardErrors checks that bad calls fail with a reason instead of
// running or panicking.
func TestForwardErrors(t *testing.T) {
	m, g := loadGolden(t)
	s := g.Sequences[0]
	in := s.Modes["a8"].Layers[0].StreamIn.f32(t)
	bad := slices.Clone(s.TokenIDs)
	bad[3] = 512
	for _, tc := range []struct {
		name   string
		l      int
		stream []float32
		ids    []int
		p      Precision
		want   string
	}{
		{"layer", 5, in, s.TokenIDs, A8, "layer 5 outside [0, 5)"},
		{"precision", 0, in, s.TokenIDs, "bf16", `precision "bf16" is not a8 or fp32`},
		{"stream", 0, in[:len(in)-1], s.TokenIDs, A8, "stream values for 24 tokens"},
		{"token", 0, in, bad, A8, "token id 512 outside the vocabulary [0, 512)"},
	} {
		_, err := m.Forward(context.Background(), tc.l, tc.stream, [][]int{tc.ids}, tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, 2, in, [][]int{s.TokenIDs}, A8); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled forward: %v", err)
	}
}

// TestCoresIndependent checks that a layer's output is the same bit for
// bit whatever the number of cores it runs on.
func TestCoresIndependent(t *testing.T) {
	m, g := loadGolden(t)
	s := g.Sequences[1]
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, l := range []int{2, 3} {
		in := s.Modes["a8"].Layers[l].StreamIn.f32(t)
		var outs [][]float32
		for _, procs := range []int{1, 3} {
			runtime.GOMAXPROCS(procs)
			out, err := m.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, A8)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, out.StreamOut)
		}
		if !slices.Equal(outs[0], outs[1]) {
			t.Errorf("layer %d: 1 and 3 cores differ by %.3g", l, relDiff(outs[0], outs[1]))
		}
	}
}

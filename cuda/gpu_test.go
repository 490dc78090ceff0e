package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// The tests in this file need a GPU. Without one they skip, unless
// DSFS_REQUIRE_CUDA=1 (bench/gpu-check.sh) makes that a failure.

// requireGPU starts a backend of precision p on device 0 for the test.
func requireGPU(t *testing.T, p Precision) *Backend {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("DSFS_REQUIRE_CUDA") == "1" {
			t.Fatalf("DSFS_REQUIRE_CUDA=1 but %v", err)
		}
		t.Skipf("skipping: needs a GPU: %v", err)
	}
	b, err := NewBackend(Options{Precision: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// newRand returns a generator with a fresh seed, logged if the test fails.
func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, 0x637564612d6f7073))
}

func randn(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

// tolerance is the largest max|Δ| / max|ref| accepted against the CPU
// backend: float32 rounding, or the bf16 error the trace README measured.
func tolerance(p Precision) float64 {
	if p == BF16 {
		return 2e-2
	}
	return 1e-4
}

// relErr is max|got - want| / max|want| over the rows not marked in skip
// (nil: every row; a row is len(want)/len(skip) values), and the index of
// the worst value.
func relErr(got, want []float32, skip []bool) (float64, int) {
	cols := len(want)
	if len(skip) > 0 {
		cols = len(want) / len(skip)
	}
	var scale, worst float64
	at := 0
	for i := range want {
		if len(skip) > 0 && skip[i/cols] {
			continue
		}
		scale = math.Max(scale, math.Abs(float64(want[i])))
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				return math.NaN(), i
			}
		}
	}
	if scale == 0 {
		return worst, at
	}
	return worst / scale, at
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	closeToRows(t, what, got, want, tol, nil)
}

// closeToRows is closeTo over the rows not marked in skip.
func closeToRows(t *testing.T, what string, got, want []float32, tol float64, skip []bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	if e, i := relErr(got, want, skip); !(e <= tol) {
		t.Errorf("%s: max|Δ|/max|ref| = %.3g > %.3g (at %d: got %g, want %g)", what, e, tol, i, got[i], want[i])
	}
}

func upload(b backend.Backend, v []float32) backend.Buffer {
	buf := b.Alloc(len(v))
	b.Upload(buf, 0, v)
	return buf
}

func download(b backend.Backend, buf backend.Buffer) ([]float32, error) {
	out := make([]float32, buf.Len())
	return out, b.Download(out, buf, 0)
}

// opCase builds its inputs from rng and returns the operation, which runs
// on a backend and returns the buffer to compare.
type opCase struct {
	name  string
	build func(rng *rand.Rand) func(b backend.Backend) backend.Buffer
}

func bf16Bits(v []float32) []uint16 {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = codecs.Float32ToBF16(x)
	}
	return h
}

var opCases = []opCase{
	{"MatMul F32 weight, strided views", func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		m, k, n := 37, 300, 129
		x, w := randn(rng, m*(k+5), 1), randn(rng, n*k, 0.05)
		return func(b backend.Backend) backend.Buffer {
			xb, dst := upload(b, x), b.Alloc(m*(n+7))
			wt := b.LoadWeight(backend.HostMatrix{Rows: n, Cols: k, F32: w})
			b.MatMul(backend.Whole(dst, m, n+7).ColRange(2, n), backend.Whole(xb, m, k+5).ColRange(3, k), wt)
			b.FreeWeight(wt)
			return dst
		}
	}},
	{"MatMul BF16 weight", func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		m, k, n := 128, 2048, 1408
		x, w := randn(rng, m*k, 1), bf16Bits(randn(rng, n*k, 0.02))
		return func(b backend.Backend) backend.Buffer {
			xb, dst := upload(b, x), b.Alloc(m*n)
			wt := b.LoadWeight(backend.HostMatrix{Rows: n, Cols: k, BF16: w})
			b.MatMul(backend.Whole(dst, m, n), backend.Whole(xb, m, k), wt)
			b.FreeWeight(wt)
			return dst
		}
	}},
	{"RMSNorm in place on columns", func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		rows, cols := 9, 512
		x, w := randn(rng, rows*(cols+64), 3), randn(rng, cols, 1)
		return func(b backend.Backend) backend.Buffer {
			xb, wb := upload(b, x), upload(b, w)
			v := backend.Whole(xb, rows, cols+64).ColRange(0, cols)
			b.RMSNorm(v, v, wb, 1e-6)
			return xb
		}
	}},
	{"RoPE, heads sharing a position", func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		tokens, heads, nope, rope := 5, 3, 16, 64
		q := randn(rng, tokens*heads*(nope+rope), 1)
		cos, sin := randn(rng, tokens*rope/2, 1), randn(rng, tokens*rope/2, 1)
		return func(b backend.Backend) backend.Buffer {
			qb, cb, sb := upload(b, q), upload(b, cos), upload(b, sin)
			b.RoPE(backend.Whole(qb, tokens*heads, nope+rope).ColRange(nope, rope), cb, sb, heads)
			return qb
		}
	}},
	{"Attention, short sequence", attentionCase(7, 4, 40, 32)},
	{"Attention, one token", attentionCase(1, 2, 24, 16)},
	{"Attention, several chunks", attentionCase(attentionTokens+45, 2, 72, 64)},
	{"SiLUMul, Add, Copy on views", func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		rows, cols := 33, 70
		g, u, a := randn(rng, rows*cols*2, 2), randn(rng, rows*cols, 1), randn(rng, rows*cols, 1)
		return func(b backend.Backend) backend.Buffer {
			gb, ub, ab, out := upload(b, g), upload(b, u), upload(b, a), b.Alloc(rows*(cols+3))
			gv := backend.Whole(gb, rows, 2*cols).ColRange(cols, cols)
			uv, av := backend.Whole(ub, rows, cols), backend.Whole(ab, rows, cols)
			ov := backend.Whole(out, rows, cols+3).ColRange(1, cols)
			b.SiLUMul(gv, gv, uv)
			b.Add(ov, gv, av)
			b.Copy(av, ov)
			b.Add(ov, ov, av)
			return out
		}
	}},
	{"Gather and ScatterAdd with repeated rows", func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		tokens, cols, picked := 40, 96, 25
		x := randn(rng, tokens*cols, 1)
		rows := make([]int32, picked)
		scale := randn(rng, picked, 1)
		for i := range rows {
			rows[i] = int32(rng.IntN(tokens))
		}
		return func(b backend.Backend) backend.Buffer {
			xb, g, y := upload(b, x), b.Alloc(picked*cols), upload(b, x)
			b.Gather(backend.Whole(g, picked, cols), backend.Whole(xb, tokens, cols), rows)
			b.ScatterAdd(backend.Whole(y, tokens, cols), backend.Whole(g, picked, cols), rows, scale)
			return y
		}
	}},
}

func attentionCase(t, heads, d, dv int) func(*rand.Rand) func(backend.Backend) backend.Buffer {
	return func(rng *rand.Rand) func(backend.Backend) backend.Buffer {
		q, kv := randn(rng, t*heads*(d+2), 1), randn(rng, t*d, 1)
		return func(b backend.Backend) backend.Buffer {
			qb, kvb, out := upload(b, q), upload(b, kv), b.Alloc(t*heads*dv)
			b.Attention(backend.Whole(out, t*heads, dv), backend.Whole(qb, t*heads, d+2).ColRange(2, d), backend.Whole(kvb, t, d), heads, 0.3)
			return out
		}
	}
}

// TestOpsMatchCPU runs every operation on random inputs on the GPU and on
// the CPU backend and compares the results.
func TestOpsMatchCPU(t *testing.T) {
	for _, p := range []Precision{FP32, BF16} {
		t.Run(p.String(), func(t *testing.T) {
			b := requireGPU(t, p)
			rng := newRand(t)
			cpu := backend.NewCPU()
			for _, c := range opCases {
				run := c.build(rng)
				want, err := download(cpu, run(cpu))
				if err != nil {
					t.Fatal(err)
				}
				got, err := download(b, run(b))
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				closeTo(t, c.name, got, want, tolerance(p))
			}
		})
	}
}

// TestErrorsReported checks that a failed call reaches Sync with the
// function's name and the driver's error name, and that the backend works
// again after that Sync.
func TestErrorsReported(t *testing.T) {
	b := requireGPU(t, FP32)
	huge := b.Alloc(1 << 40) // 4 TiB
	err := b.Sync()
	if err == nil || !strings.Contains(err.Error(), "cuMemAlloc_v2") || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("Sync after a 4 TiB allocation: %v", err)
	}
	b.Free(huge)
	x := upload(b, []float32{1, 2, 3})
	b.Add(backend.Whole(x, 1, 3), backend.Whole(x, 1, 3), backend.Whole(x, 1, 3))
	got, err := download(b, x)
	if err != nil || !slices.Equal(got, []float32{2, 4, 6}) {
		t.Errorf("after the failure: %v, %v", got, err)
	}
}

// TestBadCacheRecompiled stores images the driver rejects (with valid
// checksums) under every key and checks that the backend recompiles them.
func TestBadCacheRecompiled(t *testing.T) {
	b := requireGPU(t, FP32)
	dir := t.TempDir()
	srcs, err := sources()
	if err != nil {
		t.Fatal(err)
	}
	c := kernelCache{dir: dir}
	var keys []string
	for _, s := range srcs {
		k := cacheKey(s.text, b.target.options(), b.rt.nv.version())
		keys = append(keys, k)
		if err := c.put(k, []byte("not a kernel image\x00")); err != nil {
			t.Fatal(err)
		}
	}
	b2, err := NewBackend(Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	for _, k := range keys {
		if img, ok := c.get(k); !ok || strings.HasPrefix(string(img), "not a kernel") {
			t.Errorf("entry %s not replaced", k)
		}
	}
	x := upload(b2, []float32{1, -1})
	b2.Add(backend.Whole(x, 1, 2), backend.Whole(x, 1, 2), backend.Whole(x, 1, 2))
	if got, err := download(b2, x); err != nil || !slices.Equal(got, []float32{2, -2}) {
		t.Errorf("recompiled kernels: %v, %v", got, err)
	}
}

// goldenModel opens a reference checkpoint of testdata/trace and
// its sequences' token ids.
func goldenModel(t *testing.T, name string) (*deepseek2.Model, []int, []int) {
	t.Helper()
	dir, seqs := testdata.TraceSequences(t, name)
	var ids, lens []int
	for _, s := range seqs {
		ids = append(ids, s...)
		lens = append(lens, len(s))
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	m, err := deepseek2.Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	return m, ids, lens
}

// TestForwardMatchesCPU runs every layer of the reference checkpoints on
// both backends, each layer fed the CPU's output of the one before, and
// compares every recorded activation and route.
func TestForwardMatchesCPU(t *testing.T) {
	for _, p := range []Precision{FP32, BF16} {
		t.Run(p.String(), func(t *testing.T) {
			b := requireGPU(t, p)
			cpu := backend.NewCPU()
			for _, name := range []string{"v2lite-tiny", "v3-tiny"} {
				m, ids, lens := goldenModel(t, name)
				h, err := m.EmbedRows(ids)
				if err != nil {
					t.Fatal(err)
				}
				for l := range m.Config.Layers {
					want, err := m.Forward(context.Background(), cpu, l, h, lens)
					if err != nil {
						t.Fatal(err)
					}
					got, err := m.Forward(context.Background(), b, l, h, lens)
					if err != nil {
						t.Fatalf("%s layer %d: %v", name, l, err)
					}
					where := fmt.Sprintf("%s layer %d", name, l)
					// float32 routes must agree everywhere; bf16 ones where
					// the decision is clear of a tie. A near-tie token routed
					// differently is left out of the MoE outputs.
					var skip []bool
					if want.Routes != nil {
						minMargin := float32(0)
						if p == BF16 {
							minMargin = 1e-3
						}
						skip = sameExperts(t, where, got.Routes, want.Routes, minMargin)
					}
					for _, c := range []struct {
						what      string
						got, want []float32
						skip      []bool
					}{
						{"attn_out", got.AttnOut, want.AttnOut, nil}, {"ffn_out", got.FFNOut, want.FFNOut, skip},
						{"hidden_out", got.HiddenOut, want.HiddenOut, skip}, {"kv_a_out", got.KVA, want.KVA, nil},
						{"kv_latent", got.KVLatent, want.KVLatent, nil}, {"k_pe", got.KPE, want.KPE, nil},
					} {
						closeToRows(t, where+" "+c.what, c.got, c.want, tolerance(p), c.skip)
					}
					h = want.HiddenOut
				}
			}
		})
	}
}

// sameExperts fails the test for every token whose expert set differs
// although its reference margin exceeds minMargin, and returns the tokens
// whose sets differ within the margin.
func sameExperts(t *testing.T, where string, got, want *deepseek2.Routes, minMargin float32) []bool {
	t.Helper()
	if got == nil {
		t.Errorf("%s: no routes", where)
		return nil
	}
	k := want.K
	skip := make([]bool, len(want.Margin))
	for tok, m := range want.Margin {
		a := slices.Sorted(slices.Values(got.IDs[tok*k : (tok+1)*k]))
		b := slices.Sorted(slices.Values(want.IDs[tok*k : (tok+1)*k]))
		switch {
		case slices.Equal(a, b):
		case m > minMargin:
			t.Errorf("%s: token %d experts %v, want %v (margin %.3g)", where, tok, a, b, m)
		default:
			skip[tok] = true
			t.Logf("%s: token %d routed to %v instead of %v at a near tie (margin %.3g)", where, tok, a, b, m)
		}
	}
	return skip
}

// readVector reads a 1-D or 2-D BF16 or F32 tensor as float32.
func readVector(t *testing.T, tn *checkpoint.Tensor) []float32 {
	t.Helper()
	raw := make([]byte, tn.Size)
	if _, err := tn.Shard.ReadAt(raw, tn.Offset); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, tn.Size*8/int64(tn.DType.Bits()))
	switch tn.DType {
	case safetensors.BF16:
		codecs.DecodeBF16(out, raw)
	case safetensors.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	default:
		t.Fatalf("%s: dtype %s", tn.Name, tn.DType)
	}
	return out
}

// TestRouteMatchesModel computes the router logits of every MoE layer of
// the reference checkpoints on the GPU from the CPU forward's attention
// output, routes them with the route kernel, and compares with the CPU
// forward's routes: ids in the same order, weights and margins.
func TestRouteMatchesModel(t *testing.T) {
	b := requireGPU(t, FP32)
	cpu := backend.NewCPU()
	for _, name := range []string{"v2lite-tiny", "v3-tiny"} {
		m, ids, lens := goldenModel(t, name)
		cfg := m.Config
		h, err := m.EmbedRows(ids)
		if err != nil {
			t.Fatal(err)
		}
		tensor := func(flat string) *checkpoint.Tensor {
			tn := m.Catalog().Tensor(m.Naming.Name(flat))
			if tn == nil {
				t.Fatalf("%s: no tensor %s", name, flat)
			}
			return tn
		}
		for l := range cfg.Layers {
			want, err := m.Forward(context.Background(), cpu, l, h, lens)
			if err != nil {
				t.Fatal(err)
			}
			if want.Routes != nil {
				n := len(ids)
				h1 := make([]float32, len(h))
				for i := range h1 {
					h1[i] = h[i] + want.AttnOut[i]
				}
				hb := upload(b, h1)
				norm := upload(b, readVector(t, tensor(fmt.Sprintf("layers.%d.ffn_norm.weight", l))))
				x := b.Alloc(n * cfg.Hidden)
				b.RMSNorm(backend.Whole(x, n, cfg.Hidden), backend.Whole(hb, n, cfg.Hidden), norm, float32(cfg.RMSNormEps))
				gate := b.LoadWeight(backend.HostMatrix{Rows: cfg.RoutedExperts, Cols: cfg.Hidden,
					F32: readVector(t, tensor(fmt.Sprintf("layers.%d.ffn.gate.weight", l)))})
				logits := b.Alloc(n * cfg.RoutedExperts)
				b.MatMul(backend.Whole(logits, n, cfg.RoutedExperts), backend.Whole(x, n, cfg.Hidden), gate)
				var bias backend.Buffer
				if cfg.TopKMethod == deepseek2.TopKNoAuxTC {
					bias = upload(b, readVector(t, tensor(fmt.Sprintf("layers.%d.ffn.gate.bias", l))))
				}
				got, err := b.Route(backend.Whole(logits, n, cfg.RoutedExperts), bias, cfg)
				if err != nil {
					t.Fatal(err)
				}
				where := fmt.Sprintf("%s layer %d", name, l)
				if !slices.Equal(got.IDs, want.Routes.IDs) {
					t.Errorf("%s: experts %v, want %v", where, got.IDs, want.Routes.IDs)
				}
				closeTo(t, where+" weights", got.Weights, want.Routes.Weights, 1e-4)
				closeTo(t, where+" margins", got.Margin, want.Routes.Margin, 1e-4)
			}
			h = want.HiddenOut
		}
	}
}

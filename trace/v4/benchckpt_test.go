package v4

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/trace/backend"
)

// benchCheckpoint collects the tensors of a Flash-shaped benchmark
// checkpoint in the official formats, with random values of sensible
// magnitude, and writes them as model.safetensors.
type benchCheckpoint struct {
	src   *rand.ChaCha8
	rng   *rand.Rand
	block int64 // the FP8 weights' scale block
	specs []safetensors.Spec
	data  map[string]func([]byte)
}

func newBenchCheckpoint(seed byte, block int64) *benchCheckpoint {
	src := rand.NewChaCha8([32]byte{seed})
	return &benchCheckpoint{src: src, rng: rand.New(src), block: block, data: map[string]func([]byte){}}
}

// add lists a tensor; fill nil leaves its bytes a hole of zeros.
func (c *benchCheckpoint) add(name string, dt safetensors.DType, fill func([]byte), shape ...int64) {
	c.specs = append(c.specs, safetensors.Spec{Name: name, DType: dt, Shape: shape})
	c.data[name] = fill
}

func (c *benchCheckpoint) gauss(std float64) func([]byte) {
	return func(p []byte) {
		for i := 0; i < len(p); i += 2 {
			binary.LittleEndian.PutUint16(p[i:], codecs.Float32ToBF16(float32(c.rng.NormFloat64()*std)))
		}
	}
}

// norm fills norm weights near 1, so that the router sees logits of unit
// scale and spreads the tokens over the experts as a trained one does.
func (c *benchCheckpoint) norm(p []byte) {
	for i := 0; i < len(p); i += 2 {
		binary.LittleEndian.PutUint16(p[i:], codecs.Float32ToBF16(float32(1+c.rng.NormFloat64()*0.1)))
	}
}

func (c *benchCheckpoint) f32(std, mean float64) func([]byte) {
	return func(p []byte) {
		for i := 0; i < len(p); i += 4 {
			binary.LittleEndian.PutUint32(p[i:], math.Float32bits(float32(mean+c.rng.NormFloat64()*std)))
		}
	}
}

// fp8 fills FP8 codes below 1.0 in magnitude (no NaN).
func (c *benchCheckpoint) fp8(p []byte) {
	for i := range p {
		p[i] = byte(c.rng.IntN(0x38)) | byte(c.rng.IntN(2))<<7
	}
}

// scale fills E8M0 scales of 2^-k.
func scale(k int) func([]byte) {
	return func(p []byte) {
		for i := range p {
			p[i] = byte(127 - k)
		}
	}
}

func (c *benchCheckpoint) random(p []byte) { c.src.Read(p) }

// lin adds an FP8 linear [o, i] with scales of 2^-k.
func (c *benchCheckpoint) lin(name string, o, i int64, k int) {
	c.add(name+".weight", safetensors.F8E4M3, c.fp8, o, i)
	c.add(name+".scale", safetensors.F8E8M0, scale(k), (o+c.block-1)/c.block, (i+c.block-1)/c.block)
}

// flashShapes are the sizes a Flash-shaped benchmark layer shares
// between V4 and V4.1.
type flashShapes struct {
	d, heads, hd, qlora, groups, olora int64
	idxHeads, idxDim, inter, vocab     int64
	experts                            int
}

// layerStart adds the embedding, layer 0's norms and hyper-connections
// and its attention up to wo_b.
func (c *benchCheckpoint) layerStart(s flashShapes) {
	d := s.d
	c.add("embed.weight", safetensors.BF16, c.gauss(1), s.vocab, d)
	p := "layers.0."
	c.add(p+"attn_norm.weight", safetensors.BF16, c.norm, d)
	c.add(p+"ffn_norm.weight", safetensors.BF16, c.norm, d)
	for _, site := range []string{"attn", "ffn"} {
		c.add(p+"hc_"+site+"_fn", safetensors.F32, c.f32(1/math.Sqrt(float64(4*d)), 0), 24, 4*d)
		c.add(p+"hc_"+site+"_base", safetensors.F32, c.f32(0.5, 0), 24)
		c.add(p+"hc_"+site+"_scale", safetensors.F32, c.f32(0.1, 0.5), 3)
	}
	a := p + "attn."
	c.add(a+"attn_sink", safetensors.F32, c.f32(1, 0), s.heads)
	c.lin(a+"wq_a", s.qlora, d, 6)
	c.add(a+"q_norm.weight", safetensors.BF16, c.norm, s.qlora)
	c.lin(a+"wq_b", s.heads*s.hd, s.qlora, 5)
	c.lin(a+"wkv", s.hd, d, 6)
	c.add(a+"kv_norm.weight", safetensors.BF16, c.norm, s.hd)
	c.lin(a+"wo_a", s.groups*s.olora, s.heads*s.hd/s.groups, 6)
	c.lin(a+"wo_b", d, s.groups*s.olora, 7)
}

// indexerQuery adds the indexer's query projection and head weights.
func (c *benchCheckpoint) indexerQuery(s flashShapes) {
	a := "layers.0.attn."
	c.lin(a+"indexer.wq_b", s.idxHeads*s.idxDim, s.qlora, 5)
	c.add(a+"indexer.weights_proj.weight", safetensors.BF16, c.gauss(1/math.Sqrt(float64(s.d))), s.idxHeads, s.d)
}

// ffn adds layer 0's router, FP4 routed experts and shared expert.
func (c *benchCheckpoint) ffn(s flashShapes) {
	d, f := s.d, "layers.0.ffn."
	c.add(f+"gate.weight", safetensors.BF16, c.gauss(1/math.Sqrt(float64(d))), int64(s.experts), d)
	c.add(f+"gate.bias", safetensors.F32, c.f32(0.01, 0), int64(s.experts))
	for e := range s.experts {
		pe := f + "experts." + strconv.Itoa(e) + "."
		for _, w := range []struct {
			name string
			o, i int64
		}{{"w1", s.inter, d}, {"w2", d, s.inter}, {"w3", s.inter, d}} {
			c.add(pe+w.name+".weight", safetensors.I8, c.random, w.o, w.i/2)
			c.add(pe+w.name+".scale", safetensors.F8E8M0, scale(8), w.o, w.i/32)
		}
	}
	c.lin(f+"shared_experts.w1", s.inter, d, 6)
	c.lin(f+"shared_experts.w2", d, s.inter, 6)
	c.lin(f+"shared_experts.w3", s.inter, d, 6)
}

// write writes dir/model.safetensors; tensors without a fill stay holes
// of a sparse file.
func (c *benchCheckpoint) write(b *testing.B, dir string) {
	b.Helper()
	lay, err := safetensors.NewLayout([]safetensors.Meta{{Key: "format", Value: "pt"}}, c.specs)
	if err != nil {
		b.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if _, err := out.Write(lay.Header); err != nil {
		b.Fatal(err)
	}
	var end int64
	for _, ts := range lay.Tensors {
		end = max(end, lay.DataStart()+ts.Begin+ts.Len())
		if c.data[ts.Name] == nil {
			continue
		}
		buf := make([]byte, ts.Len())
		c.data[ts.Name](buf)
		if _, err := out.WriteAt(buf, lay.DataStart()+ts.Begin); err != nil {
			b.Fatal(err)
		}
	}
	if err := out.Truncate(end); err != nil {
		b.Fatal(err)
	}
}

// benchExperts is the number of routed experts the environment variable
// env asks for, else def.
func benchExperts(b *testing.B, env string, def int) int {
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 6 {
		b.Fatalf("%s=%q: want a number of at least 6", env, s)
	}
	return n
}

// benchPrompts is 4 prompts of 32 random token ids below vocab, and all
// their ids in a row.
func benchPrompts(vocab int) (seqs [][]int, ids []int) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 4 {
		s := make([]int, 32)
		for i := range s {
			s[i] = rng.IntN(vocab)
		}
		seqs = append(seqs, s)
	}
	for _, s := range seqs {
		ids = append(ids, s...)
	}
	return seqs, ids
}

// benchBackend is the backend the environment variable env names: nil
// for the host ("" or cpu), or a CUDA backend closed at the end of b.
func benchBackend(b *testing.B, env string) backend.Backend {
	switch s := os.Getenv(env); s {
	case "", "cpu":
		return nil
	case "cuda":
		cb, err := cuda.NewBackend(cuda.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cb.Close() })
		return cb
	default:
		b.Fatalf("%s=%q: want cpu or cuda", env, s)
	}
	return nil
}

// benchTimes sums the timings of the forwards of a benchmark.
type benchTimes struct {
	total, gemm, load time.Duration
	cpu0              time.Duration
}

// add adds one forward's whole, matrix product and weight loading times.
func (t *benchTimes) add(total, gemm, load time.Duration) {
	t.total += total
	t.gemm += gemm
	t.load += load
}

// openBenchCatalog opens the benchmark checkpoint in dir for the rest of
// the benchmark.
func openBenchCatalog(b *testing.B, dir string) *checkpoint.Catalog {
	b.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cat.Close() })
	return cat
}

// report reports tokens/s over tokens per forward, the shares of time in
// matrix products and in loading weights, and the CPU time per forward.
func (t *benchTimes) report(b *testing.B, tokens int) {
	b.ReportMetric(float64(tokens*b.N)/t.total.Seconds(), "tokens/s")
	b.ReportMetric(t.gemm.Seconds()/t.total.Seconds(), "gemm-share")
	b.ReportMetric(t.load.Seconds()/t.total.Seconds(), "load-share")
	// On a shared machine the wall time depends on the neighbours; the
	// process's CPU time per forward does much less.
	b.ReportMetric((cpuTime(b)-t.cpu0).Seconds()/float64(b.N), "cpu-s/op")
}

// reportAgreement reports the largest max|Δ|/max|ref| of a layer's
// outputs on a backend (got) against the host (want) and the tokens
// routed differently.
func reportAgreement(b *testing.B, tokens int, got, want [3][]float32, gotRoutes, wantRoutes Routes) {
	b.ReportMetric(max(relDiff(got[0], want[0]), relDiff(got[1], want[1]), relDiff(got[2], want[2])), "max-rel-err")
	k, differ := wantRoutes.K, 0
	for t := range tokens {
		if !slices.Equal(slices.Sorted(slices.Values(gotRoutes.IDs[t*k:(t+1)*k])), slices.Sorted(slices.Values(wantRoutes.IDs[t*k:(t+1)*k]))) {
			differ++
		}
	}
	b.ReportMetric(float64(differ), "tokens-routed-differently")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

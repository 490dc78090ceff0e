package v4

import (
	"context"
	"encoding/binary"
	"encoding/json"
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
	"github.com/dsfs/dsfs/trace/model"
)

// flashLayer writes a one-layer checkpoint with V4-Flash's layer shapes
// (D 4096, 64 heads of 512, q LoRA 1024, 8 groups of 1024, a ratio-4
// compressor with the 64 x 128 indexer, experts of 2048, top 6) and
// experts routed experts, in the official formats, with random values of
// sensible magnitude. The vocabulary is cut to 1024 rows.
func flashLayer(b *testing.B, dir string, experts int) {
	b.Helper()
	const (
		d, heads, hd, qlora, groups, olora = 4096, 64, 512, 1024, 8, 1024
		idxHeads, idxDim, inter, vocab     = 64, 128, 2048, 1024
	)
	cfg := map[string]any{
		"model_type": "deepseek_v4", "architectures": []string{"DeepseekV4ForCausalLM"},
		"hidden_size": d, "vocab_size": vocab, "num_hidden_layers": 1, "num_nextn_predict_layers": 0,
		"num_attention_heads": heads, "head_dim": hd, "qk_rope_head_dim": 64, "q_lora_rank": qlora,
		"o_groups": groups, "o_lora_rank": olora, "sliding_window": 128, "compress_ratios": []int{4},
		"rope_theta": 10000, "compress_rope_theta": 160000,
		"rope_scaling":  map[string]any{"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
		"index_n_heads": idxHeads, "index_head_dim": idxDim, "index_topk": 512,
		"hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
		"n_routed_experts": experts, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": inter,
		"scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "num_hash_layers": 0,
		"expert_dtype":        "fp4",
		"quantization_config": map[string]any{"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "weight_block_size": []int{128, 128}},
	}
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		b.Fatal(err)
	}
	src := rand.NewChaCha8([32]byte{4})
	rng := rand.New(src)
	var specs []safetensors.Spec
	data := map[string]func([]byte){}
	add := func(name string, dt safetensors.DType, fill func([]byte), shape ...int64) {
		specs = append(specs, safetensors.Spec{Name: name, DType: dt, Shape: shape})
		data[name] = fill
	}
	gauss := func(std float64) func([]byte) {
		return func(p []byte) {
			for i := 0; i < len(p); i += 2 {
				binary.LittleEndian.PutUint16(p[i:], codecs.Float32ToBF16(float32(rng.NormFloat64()*std)))
			}
		}
	}
	// Norm weights near 1, so that the router sees logits of unit scale
	// and spreads the tokens over the experts as a trained one does.
	norm := func(p []byte) {
		for i := 0; i < len(p); i += 2 {
			binary.LittleEndian.PutUint16(p[i:], codecs.Float32ToBF16(float32(1+rng.NormFloat64()*0.1)))
		}
	}
	f32 := func(std, mean float64) func([]byte) {
		return func(p []byte) {
			for i := 0; i < len(p); i += 4 {
				binary.LittleEndian.PutUint32(p[i:], math.Float32bits(float32(mean+rng.NormFloat64()*std)))
			}
		}
	}
	// FP8 codes below 1.0 in magnitude (no NaN), E8M0 scales 2^-k.
	fp8 := func(p []byte) {
		for i := range p {
			p[i] = byte(rng.IntN(0x38)) | byte(rng.IntN(2))<<7
		}
	}
	scale := func(k int) func([]byte) {
		return func(p []byte) {
			for i := range p {
				p[i] = byte(127 - k)
			}
		}
	}
	random := func(p []byte) { src.Read(p) }
	lin := func(name string, o, i int64, k int) {
		add(name+".weight", safetensors.F8E4M3, fp8, o, i)
		add(name+".scale", safetensors.F8E8M0, scale(k), (o+127)/128, (i+127)/128)
	}
	add("embed.weight", safetensors.BF16, gauss(1), vocab, d)
	p := "layers.0."
	add(p+"attn_norm.weight", safetensors.BF16, norm, d)
	add(p+"ffn_norm.weight", safetensors.BF16, norm, d)
	for _, site := range []string{"attn", "ffn"} {
		add(p+"hc_"+site+"_fn", safetensors.F32, f32(1/math.Sqrt(4*d), 0), 24, 4*d)
		add(p+"hc_"+site+"_base", safetensors.F32, f32(0.5, 0), 24)
		add(p+"hc_"+site+"_scale", safetensors.F32, f32(0.1, 0.5), 3)
	}
	a := p + "attn."
	add(a+"attn_sink", safetensors.F32, f32(1, 0), heads)
	lin(a+"wq_a", qlora, d, 6)
	add(a+"q_norm.weight", safetensors.BF16, norm, qlora)
	lin(a+"wq_b", heads*hd, qlora, 5)
	lin(a+"wkv", hd, d, 6)
	add(a+"kv_norm.weight", safetensors.BF16, norm, hd)
	lin(a+"wo_a", groups*olora, heads*hd/groups, 6)
	lin(a+"wo_b", d, groups*olora, 7)
	for _, c := range []struct {
		prefix string
		hd     int64
	}{{a + "compressor", hd}, {a + "indexer.compressor", idxDim}} {
		add(c.prefix+".ape", safetensors.F32, f32(0.5, 0), 4, 2*c.hd)
		add(c.prefix+".wkv.weight", safetensors.BF16, gauss(1/math.Sqrt(d)), 2*c.hd, d)
		add(c.prefix+".wgate.weight", safetensors.BF16, gauss(1/math.Sqrt(d)), 2*c.hd, d)
		add(c.prefix+".norm.weight", safetensors.BF16, norm, c.hd)
	}
	lin(a+"indexer.wq_b", idxHeads*idxDim, qlora, 5)
	add(a+"indexer.weights_proj.weight", safetensors.BF16, gauss(1/math.Sqrt(d)), idxHeads, d)
	f := p + "ffn."
	add(f+"gate.weight", safetensors.BF16, gauss(1/math.Sqrt(d)), int64(experts), d)
	add(f+"gate.bias", safetensors.F32, f32(0.01, 0), int64(experts))
	for e := range experts {
		pe := f + "experts." + strconv.Itoa(e) + "."
		for _, w := range []struct {
			name string
			o, i int64
		}{{"w1", inter, d}, {"w2", d, inter}, {"w3", inter, d}} {
			add(pe+w.name+".weight", safetensors.I8, random, w.o, w.i/2)
			add(pe+w.name+".scale", safetensors.F8E8M0, scale(8), w.o, w.i/32)
		}
	}
	lin(f+"shared_experts.w1", inter, d, 6)
	lin(f+"shared_experts.w2", d, inter, 6)
	lin(f+"shared_experts.w3", inter, d, 6)

	lay, err := safetensors.NewLayout([]safetensors.Meta{{Key: "format", Value: "pt"}}, specs)
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
	for _, ts := range lay.Tensors {
		buf := make([]byte, ts.Len())
		data[ts.Name](buf)
		if _, err := out.WriteAt(buf, lay.DataStart()+ts.Begin); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFlashLayer runs a V4-Flash-shaped CSA layer (see flashLayer)
// on 4 prompts of 32 tokens in the a8 precision and reports tokens/s and
// the shares of time in matrix products and in reading and decoding
// weights. DSFS_V4_BENCH_EXPERTS sets the number of routed experts
// (default 256, V4-Flash's: a 3.3 GB layer file in a temporary
// directory). DSFS_V4_BENCH_DEVICE=cuda runs the forwards on the CUDA
// backend and then once on the host, and reports the largest
// max|Δ|/max|ref| of the layer's outputs and the tokens routed
// differently (bench/gpu-check.sh).
func BenchmarkFlashLayer(b *testing.B) {
	experts := 256
	if s := os.Getenv("DSFS_V4_BENCH_EXPERTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 6 {
			b.Fatalf("DSFS_V4_BENCH_EXPERTS=%q: want a number of at least 6", s)
		}
		experts = n
	}
	dir := b.TempDir()
	flashLayer(b, dir, experts)
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	m, err := Open(cat, nil)
	if err != nil {
		b.Fatal(err)
	}
	if p := m.Problems(0); p != nil {
		b.Fatal(p)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var seqs [][]int
	for range 4 {
		s := make([]int, 32)
		for i := range s {
			s[i] = rng.IntN(m.Config.Vocab)
		}
		seqs = append(seqs, s)
	}
	var ids []int
	for _, s := range seqs {
		ids = append(ids, s...)
	}
	emb, err := m.EmbedRows(ids)
	if err != nil {
		b.Fatal(err)
	}
	stream := make([]float32, 0, len(emb)*4)
	for r := 0; r < len(emb); r += m.Config.Hidden {
		for range 4 {
			stream = append(stream, emb[r:r+m.Config.Hidden]...)
		}
	}
	var dev model.Backend
	switch s := os.Getenv("DSFS_V4_BENCH_DEVICE"); s {
	case "", "cpu":
	case "cuda":
		cb, err := cuda.NewBackend(cuda.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer cb.Close()
		dev = cb
	default:
		b.Fatalf("DSFS_V4_BENCH_DEVICE=%q: want cpu or cuda", s)
	}
	m.SetBackend(dev)
	var total, gemm, load time.Duration
	var run int
	var last *LayerOutput
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for range b.N {
		out, err := m.Forward(context.Background(), 0, stream, seqs, A8)
		if err != nil {
			b.Fatal(err)
		}
		last = out
		total += out.Time
		gemm += out.GEMMTime
		load += out.LoadTime
		run = out.ExpertsRun
	}
	b.ReportMetric(float64(len(ids)*b.N)/total.Seconds(), "tokens/s")
	b.ReportMetric(gemm.Seconds()/total.Seconds(), "gemm-share")
	b.ReportMetric(load.Seconds()/total.Seconds(), "load-share")
	b.ReportMetric(float64(run), "experts-run")
	// On a shared machine the wall time depends on the neighbours; the
	// process's CPU time per forward does much less.
	b.ReportMetric((cpuTime(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	if dev == nil {
		return
	}
	b.StopTimer()
	m.SetBackend(nil)
	want, err := m.Forward(context.Background(), 0, stream, seqs, A8)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(max(relDiff(last.AttnOut, want.AttnOut), relDiff(last.FFNOut, want.FFNOut), relDiff(last.StreamOut, want.StreamOut)), "max-rel-err")
	k, differ := want.Routes.K, 0
	for t := range want.Tokens {
		if !slices.Equal(slices.Sorted(slices.Values(last.Routes.IDs[t*k:(t+1)*k])), slices.Sorted(slices.Values(want.Routes.IDs[t*k:(t+1)*k]))) {
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

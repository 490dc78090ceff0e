package v4

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
)

// flash41Layer writes a one-layer checkpoint with V4.1-Flash's shapes for
// its costliest kind of layer: a CSA2 full layer (ratio 2, own compressor,
// index keys and indexer) with Engram (8 heads x 3 orders of 256-wide
// rows over tables of ~384M rows, written as a sparse file: only looked
// up rows are read), D 5120, 64 heads of 512, q LoRA 1280, 8 groups of
// 1024, experts of 2304, top 6, FP8 32x32 blocks. The vocabulary is cut
// to 1024 rows and the token map is v41-tiny's tokenizer's.
func flash41Layer(b *testing.B, dir string, experts int) {
	b.Helper()
	const (
		d, heads, hd, qlora, groups, olora = 5120, 64, 512, 1280, 8, 1024
		idxHeads, idxDim, inter, vocab     = 32, 128, 2304, 1024
		eHeads, eDim, eOrders, eVocab      = 8, 256, 3, 16000000
	)
	primes := EngramPrimes(1, eOrders+1, eHeads, eVocab)[0]
	var rows int64
	for _, p := range primes {
		rows += p
	}
	tc := map[string]any{
		"model_type": "deepseek_v41_text", "hidden_size": d, "vocab_size": vocab, "num_hidden_layers": 1, "num_nextn_predict_layers": 0,
		"num_attention_heads": heads, "head_dim": hd, "qk_rope_head_dim": 64, "q_lora_rank": qlora,
		"o_groups": groups, "o_lora_rank": olora, "sliding_window": 128, "compress_ratios": []int{2},
		"rope_theta": 10000, "compress_rope_theta": 160000,
		"rope_scaling":  map[string]any{"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
		"index_n_heads": idxHeads, "index_head_dim": idxDim, "index_topk": 512,
		"kv_source_layer_ids": []int{0}, "index_source_layer_ids": []int{0}, "candidate_source_layer_id": -1,
		"hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-20,
		"n_routed_experts": experts, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": inter,
		"scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "norm_topk_prob": true,
		"engram_layer_ids": []int{0}, "engram_num_embeddings": []int64{rows}, "engram_max_ngram_size": eOrders + 1,
		"engram_vocab_size": eVocab, "engram_n_heads": eHeads, "engram_head_dim": eDim, "engram_pad_token_id": 2,
		"engram_compressed_vocab_size": 408,
	}
	cfg := map[string]any{"model_type": "deepseek_v41", "architectures": []string{"DeepseekV41ForCausalLM"}, "text_config": tc,
		"quantization_config": map[string]any{"quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": []int{32, 32}, "expert_dtype": "fp4"}}
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		b.Fatal(err)
	}
	tj, err := os.ReadFile(filepath.Join(testdata.Dir(b), "trace", "v41-tiny", "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		b.Fatal(err)
	}
	src := rand.NewChaCha8([32]byte{41})
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
		add(name+".scale", safetensors.F8E8M0, scale(k), (o+31)/32, (i+31)/32)
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
	add(a+"compressor.wkv.weight", safetensors.BF16, gauss(1/math.Sqrt(d)), hd, d)
	add(a+"compressor.wgate.weight", safetensors.BF16, gauss(1/math.Sqrt(d)), hd, d)
	add(a+"compressor.norm.weight", safetensors.BF16, norm, hd)
	add(a+"indexer.wk.weight", safetensors.BF16, gauss(1/math.Sqrt(hd)), idxDim, hd)
	add(a+"indexer.k_norm.weight", safetensors.BF16, norm, idxDim)
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
	e := p + "engram."
	// The tables stay holes: zero codes and scales, never written.
	add(e+"embed.weight", safetensors.F8E4M3, nil, rows, eDim)
	add(e+"embed.scale", safetensors.F8E8M0, nil, rows, eDim/32)
	lin(e+"wkv", d*5, eOrders*eHeads*eDim, 7)
	add(e+"q_weight", safetensors.BF16, norm, 4, d)
	add(e+"k_weight", safetensors.BF16, norm, 4, d)

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
	var end int64
	for _, ts := range lay.Tensors {
		end = max(end, lay.DataStart()+ts.Begin+ts.Len())
		if data[ts.Name] == nil {
			continue
		}
		buf := make([]byte, ts.Len())
		data[ts.Name](buf)
		if _, err := out.WriteAt(buf, lay.DataStart()+ts.Begin); err != nil {
			b.Fatal(err)
		}
	}
	if err := out.Truncate(end); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFlash41Layer runs a V4.1-Flash-shaped CSA2 full layer with
// Engram (see flash41Layer) on 4 prompts of 32 tokens in the a8
// precision and reports tokens/s, the checkpoint bytes read per forward,
// and the shares of time in matrix products and in reading and decoding
// weights. DSFS_V41_BENCH_EXPERTS sets the number of routed experts
// (default 384, V4.1-Flash's: a 6.8 GB layer file plus a 101 GB sparse
// Engram table in a temporary directory).
func BenchmarkFlash41Layer(b *testing.B) {
	experts := 384
	if s := os.Getenv("DSFS_V41_BENCH_EXPERTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 6 {
			b.Fatalf("DSFS_V41_BENCH_EXPERTS=%q: want a number of at least 6", s)
		}
		experts = n
	}
	dir := b.TempDir()
	flash41Layer(b, dir, experts)
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := Open41(cat, nil, tj)
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
			s[i] = rng.IntN(640)
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
	st := m.Config.InitialState41(emb, len(seqs))
	var total, gemm, load time.Duration
	var run int
	var read int64
	b.ResetTimer()
	for range b.N {
		out, err := m.Forward(context.Background(), 0, st, seqs, A8)
		if err != nil {
			b.Fatal(err)
		}
		total += out.Time
		gemm += out.GEMMTime
		load += out.LoadTime
		run = out.ExpertsRun
		read = out.WeightBytes
	}
	b.ReportMetric(float64(len(ids)*b.N)/total.Seconds(), "tokens/s")
	b.ReportMetric(total.Seconds()/float64(b.N), "s/forward")
	b.ReportMetric(float64(read)/1e9, "GB-read")
	b.ReportMetric(gemm.Seconds()/total.Seconds(), "gemm-share")
	b.ReportMetric(load.Seconds()/total.Seconds(), "load-share")
	b.ReportMetric(float64(run), "experts-run")
}

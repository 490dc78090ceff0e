package v4

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
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
	s := flashShapes{d: d, heads: heads, hd: hd, qlora: qlora, groups: groups, olora: olora,
		idxHeads: idxHeads, idxDim: idxDim, inter: inter, vocab: vocab, experts: experts}
	c := newBenchCheckpoint(41, 32)
	c.layerStart(s)
	a := "layers.0.attn."
	c.add(a+"compressor.wkv.weight", safetensors.BF16, c.gauss(1/math.Sqrt(d)), hd, d)
	c.add(a+"compressor.wgate.weight", safetensors.BF16, c.gauss(1/math.Sqrt(d)), hd, d)
	c.add(a+"compressor.norm.weight", safetensors.BF16, c.norm, hd)
	c.add(a+"indexer.wk.weight", safetensors.BF16, c.gauss(1/math.Sqrt(hd)), idxDim, hd)
	c.add(a+"indexer.k_norm.weight", safetensors.BF16, c.norm, idxDim)
	c.indexerQuery(s)
	c.ffn(s)
	e := "layers.0.engram."
	// The tables stay holes: zero codes and scales, never written.
	c.add(e+"embed.weight", safetensors.F8E4M3, nil, rows, eDim)
	c.add(e+"embed.scale", safetensors.F8E8M0, nil, rows, eDim/32)
	c.lin(e+"wkv", d*5, eOrders*eHeads*eDim, 7)
	c.add(e+"q_weight", safetensors.BF16, c.norm, 4, d)
	c.add(e+"k_weight", safetensors.BF16, c.norm, 4, d)
	c.write(b, dir)
}

// BenchmarkFlash41Layer runs a V4.1-Flash-shaped CSA2 full layer with
// Engram (see flash41Layer) on 4 prompts of 32 tokens in the a8
// precision and reports tokens/s, the checkpoint bytes read per forward,
// and the shares of time in matrix products and in reading and decoding
// weights. DSFS_V41_BENCH_EXPERTS sets the number of routed experts
// (default 384, V4.1-Flash's: a 6.8 GB layer file plus a 101 GB sparse
// Engram table in a temporary directory). DSFS_V41_BENCH_DEVICE=cuda runs
// the forwards on the CUDA backend and then once on the host, and reports
// the largest max|Δ|/max|ref| of the layer's outputs and the tokens
// routed differently (bench/gpu-check.sh).
func BenchmarkFlash41Layer(b *testing.B) {
	experts := benchExperts(b, "DSFS_V41_BENCH_EXPERTS", 384)
	dir := b.TempDir()
	flash41Layer(b, dir, experts)
	cat := openBenchCatalog(b, dir)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := Open41(cat, nil, tok)
	if err != nil {
		b.Fatal(err)
	}
	if p := m.Problems(0); p != nil {
		b.Fatal(p)
	}
	seqs, ids := benchPrompts(640)
	emb, err := m.EmbedRows(ids)
	if err != nil {
		b.Fatal(err)
	}
	st := m.Config.InitialState41(emb, len(seqs))
	dev := benchBackend(b, "DSFS_V41_BENCH_DEVICE")
	m.SetBackend(dev)
	var times benchTimes
	var run int
	var read int64
	var last *LayerOutput41
	times.cpu0 = cpuTime(b)
	b.ResetTimer()
	for range b.N {
		out, err := m.Forward(context.Background(), 0, st, seqs, A8)
		if err != nil {
			b.Fatal(err)
		}
		last = out
		times.add(out.Time, out.GEMMTime, out.LoadTime)
		run = out.ExpertsRun
		read = out.WeightBytes
	}
	b.ReportMetric(times.total.Seconds()/float64(b.N), "s/forward")
	b.ReportMetric(float64(read)/1e9, "GB-read")
	b.ReportMetric(float64(run), "experts-run")
	times.report(b, len(ids))
	if dev == nil {
		return
	}
	b.StopTimer()
	m.SetBackend(nil)
	want, err := m.Forward(context.Background(), 0, st, seqs, A8)
	if err != nil {
		b.Fatal(err)
	}
	reportAgreement(b, want.Tokens, [3][]float32{last.AttnOut, last.FFNOut, last.StreamOut}, [3][]float32{want.AttnOut, want.FFNOut, want.StreamOut}, last.Routes, want.Routes)
}

package v4

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
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
	s := flashShapes{d: d, heads: heads, hd: hd, qlora: qlora, groups: groups, olora: olora,
		idxHeads: idxHeads, idxDim: idxDim, inter: inter, vocab: vocab, experts: experts}
	c := newBenchCheckpoint(4, 128)
	c.layerStart(s)
	a := "layers.0.attn."
	for _, cp := range []struct {
		prefix string
		hd     int64
	}{{a + "compressor", hd}, {a + "indexer.compressor", idxDim}} {
		c.add(cp.prefix+".ape", safetensors.F32, c.f32(0.5, 0), 4, 2*cp.hd)
		c.add(cp.prefix+".wkv.weight", safetensors.BF16, c.gauss(1/math.Sqrt(d)), 2*cp.hd, d)
		c.add(cp.prefix+".wgate.weight", safetensors.BF16, c.gauss(1/math.Sqrt(d)), 2*cp.hd, d)
		c.add(cp.prefix+".norm.weight", safetensors.BF16, c.norm, cp.hd)
	}
	c.indexerQuery(s)
	c.ffn(s)
	c.write(b, dir)
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
	experts := benchExperts(b, "DSFS_V4_BENCH_EXPERTS", 256)
	dir := b.TempDir()
	flashLayer(b, dir, experts)
	cat := openBenchCatalog(b, dir)
	m, err := Open(cat, nil)
	if err != nil {
		b.Fatal(err)
	}
	if p := m.Problems(0); p != nil {
		b.Fatal(p)
	}
	seqs, ids := benchPrompts(m.Config.Vocab)
	emb, err := m.EmbedRows(ids)
	if err != nil {
		b.Fatal(err)
	}
	stream := m.Config.InitialStream(emb)
	dev := benchBackend(b, "DSFS_V4_BENCH_DEVICE")
	m.SetBackend(dev)
	var times benchTimes
	var run int
	var last *LayerOutput
	times.cpu0 = cpuTime(b)
	b.ResetTimer()
	for range b.N {
		out, err := m.Forward(context.Background(), 0, stream, seqs, A8)
		if err != nil {
			b.Fatal(err)
		}
		last = out
		times.add(out.Time, out.GEMMTime, out.LoadTime)
		run = out.ExpertsRun
	}
	b.ReportMetric(float64(run), "experts-run")
	times.report(b, len(ids))
	if dev == nil {
		return
	}
	b.StopTimer()
	m.SetBackend(nil)
	want, err := m.Forward(context.Background(), 0, stream, seqs, A8)
	if err != nil {
		b.Fatal(err)
	}
	reportAgreement(b, want.Tokens, [3][]float32{last.AttnOut, last.FFNOut, last.StreamOut}, [3][]float32{want.AttnOut, want.FFNOut, want.StreamOut}, last.Routes, want.Routes)
}

package gguf_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// openV4 copies testdata/trace/v4-tiny (the official V4-Flash layout,
// which ships no tokenizer) and adds a synthesised DeepSeek-style
// tokenizer of its 512-token vocabulary.
func openV4(t *testing.T) *checkpoint.Catalog {
	t.Helper()
	ref, _ := testdata.TraceSequences(t, "v4-tiny")
	dir := filepath.Join(t.TempDir(), "v4-tiny")
	os.Mkdir(dir, 0o755)
	for _, name := range []string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		b, err := os.ReadFile(filepath.Join(ref, name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	if err := synth.WriteTokenizer(dir, 512); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func sourceBytes(t *testing.T, s *checkpoint.Tensor) []byte {
	t.Helper()
	b := make([]byte, s.Size)
	if _, err := s.Shard.ReadAt(b, s.Offset); err != nil {
		t.Fatal(err)
	}
	return b
}

// refRepack is the converter's MXFP4 repack written per value: value k of
// a row (source byte k/2, low nibble when k is even) goes to block k/32,
// byte 1 + k%16, low nibble when k%32 < 16; byte 0 of a block is its
// scale.
func refRepack(t *testing.T, w *checkpoint.Tensor) []byte {
	codes, scales := sourceBytes(t, w), sourceBytes(t, w.Scale)
	rows, cols := w.Shape[0], w.Shape[1]*2
	out := make([]byte, rows*cols/32*17)
	for r := range rows {
		for k := range cols {
			nib := codes[r*cols/2+k/2] >> (4 * (k % 2)) & 0x0f
			blk := r*cols/32 + k/32
			out[blk*17] = scales[blk]
			out[blk*17+1+k%16] |= nib << (4 * (k % 32 / 16))
		}
	}
	return out
}

// refDequantV4 is DeepseekV4Model.dequant_fp8_weight: E4M3 times
// 2^(e8m0-127) of its 128x128 block, in float32.
func refDequantV4(t *testing.T, w *checkpoint.Tensor) []float32 {
	b, sb := sourceBytes(t, w), sourceBytes(t, w.Scale)
	cols := w.Shape[1]
	v := make([]float32, len(b))
	for i := range v {
		r, c := int64(i)/cols, int64(i)%cols
		v[i] = codecs.E4M3ToFloat32(b[i]) * float32(math.Exp2(float64(sb[r/128*w.Scale.Shape[1]+c/128])-127))
	}
	return v
}

// TestDeepseek4Tensors checks every tensor of the MXFP4 recipe on
// v4-tiny against the converter's rule applied to its source: names,
// shapes, types and bytes.
func TestDeepseek4Tensors(t *testing.T) {
	cat := openV4(t)
	m, err := recipe(t, "MXFP4").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]gguf.Tensor{}
	for _, ten := range m.Tensors {
		if _, dup := byName[ten.Name]; dup {
			t.Errorf("tensor %s twice", ten.Name)
		}
		byName[ten.Name] = ten
	}
	const layers, experts, hashLayers = 5, 16, 3
	seen := map[string]bool{}
	check := func(name string, typ gguf.Type, ne []int64, want []byte) {
		t.Helper()
		seen[name] = true
		ten, ok := byName[name]
		if !ok {
			t.Errorf("tensor %s missing", name)
			return
		}
		if ten.Type != typ || fmt.Sprint(ten.Ne) != fmt.Sprint(ne) {
			t.Errorf("%s: %s %v, want %s %v", name, ten.Type.Name, ten.Ne, typ.Name, ne)
			return
		}
		if got := tensorBytes(t, ten); !bytes.Equal(got, want) {
			t.Errorf("%s: bytes differ from the converter's", name)
		}
	}
	for _, s := range cat.Tensors {
		name, ok := v4GGUFName(s.Name)
		if !ok {
			continue
		}
		if strings.HasSuffix(s.Name, "ffn.gate.bias") && s.Layer < hashLayers {
			if _, ok := byName[name]; ok {
				t.Errorf("%s: the converter drops a hash layer's gate.bias", name)
			}
			continue
		}
		ne := make([]int64, len(s.Shape))
		for i, d := range s.Shape {
			ne[len(s.Shape)-1-i] = d
		}
		switch {
		case strings.HasSuffix(name, "tid2eid.weight"):
			check(name, gguf.I32, ne, sourceBytes(t, s))
		case s.Format == checkpoint.FormatFP8:
			check(name, gguf.Q8_0, ne, encodeRef(t, refDequantV4(t, s), gguf.Q8_0))
		case s.DType == safetensors.F32:
			check(name, gguf.F32, ne, sourceBytes(t, s))
		case len(s.Shape) == 1:
			v, _ := refValues(t, cat, s.Name)
			check(name, gguf.F32, ne, encodeRef(t, v, gguf.F32))
		case s.DType == safetensors.BF16:
			check(name, gguf.BF16, ne, sourceBytes(t, s))
		default:
			t.Errorf("%s: unexpected source %s %v", s.Name, s.DType, s.Shape)
		}
	}
	for l := range layers {
		for _, pr := range [][2]string{{"ffn_gate_exps", "w1"}, {"ffn_down_exps", "w2"}, {"ffn_up_exps", "w3"}} {
			var want []byte
			var w *checkpoint.Tensor
			for e := range experts {
				w = cat.Tensor(fmt.Sprintf("layers.%d.ffn.experts.%d.%s.weight", l, e, pr[1]))
				want = append(want, refRepack(t, w)...)
			}
			check(fmt.Sprintf("blk.%d.%s.weight", l, pr[0]), gguf.MXFP4, []int64{w.Shape[1] * 2, w.Shape[0], experts}, want)
		}
	}
	for name := range byName {
		if !seen[name] {
			t.Errorf("tensor %s has no source the converter maps to it", name)
		}
	}
	for l := range hashLayers {
		if !seen[fmt.Sprintf("blk.%d.ffn_gate_tid2eid.weight", l)] {
			t.Errorf("layer %d: no tid2eid", l)
		}
	}
}

// v4GGUFName is the converter's name for a non-expert, non-scale tensor
// (deepseek.py's root and layer maps, restated for the test).
func v4GGUFName(src string) (string, bool) {
	root := map[string]string{"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight", "head.weight": "output.weight",
		"hc_head_fn": "output_hc_fn.weight", "hc_head_base": "output_hc_base.weight", "hc_head_scale": "output_hc_scale.weight"}
	if g, ok := root[src]; ok {
		return g, true
	}
	var l int
	var rest string
	if n, _ := fmt.Sscanf(src, "layers.%d.", &l); n != 1 {
		return "", false
	}
	rest = strings.SplitN(src, ".", 3)[2]
	layer := map[string]string{
		"hc_attn_fn": "hc_attn_fn", "hc_attn_base": "hc_attn_base", "hc_attn_scale": "hc_attn_scale",
		"hc_ffn_fn": "hc_ffn_fn", "hc_ffn_base": "hc_ffn_base", "hc_ffn_scale": "hc_ffn_scale",
		"attn.attn_sink": "attn_sinks", "attn.wq_a.weight": "attn_q_a", "attn.wq_b.weight": "attn_q_b",
		"attn.q_norm.weight": "attn_q_a_norm", "attn.wkv.weight": "attn_kv", "attn.kv_norm.weight": "attn_kv_a_norm",
		"attn.wo_a.weight": "attn_output_a", "attn.wo_b.weight": "attn_output_b",
		"attn.compressor.ape": "attn_compressor_ape", "attn.compressor.wkv.weight": "attn_compressor_kv",
		"attn.compressor.wgate.weight": "attn_compressor_gate", "attn.compressor.norm.weight": "attn_compressor_norm",
		"attn.indexer.wq_b.weight": "indexer.attn_q_b", "attn.indexer.weights_proj.weight": "indexer.proj",
		"attn.indexer.compressor.ape": "indexer_compressor_ape", "attn.indexer.compressor.wkv.weight": "indexer_compressor_kv",
		"attn.indexer.compressor.wgate.weight": "indexer_compressor_gate", "attn.indexer.compressor.norm.weight": "indexer_compressor_norm",
		"attn_norm.weight": "attn_norm", "ffn_norm.weight": "ffn_norm", "ffn.gate.weight": "ffn_gate_inp",
		"ffn.gate.tid2eid": "ffn_gate_tid2eid", "ffn.shared_experts.w1.weight": "ffn_gate_shexp",
		"ffn.shared_experts.w2.weight": "ffn_down_shexp", "ffn.shared_experts.w3.weight": "ffn_up_shexp",
	}
	switch rest {
	case "ffn.gate.bias":
		return fmt.Sprintf("blk.%d.exp_probs_b.bias", l), true
	case "ffn.gate.bias_vl":
		return fmt.Sprintf("blk.%d.exp_probs_b_vl.bias", l), true
	}
	g, ok := layer[rest]
	return fmt.Sprintf("blk.%d.%s.weight", l, g), ok
}

// TestDeepseek4Metadata parses the single file and the split shards with
// the strict reader and checks the deepseek4 keys llama.cpp reads.
func TestDeepseek4Metadata(t *testing.T) {
	cat := openV4(t)
	m, err := recipe(t, "MXFP4").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	files, err := m.Files(0)
	if err != nil {
		t.Fatal(err)
	}
	h := readHeader(t, files[0])
	want := map[string]any{
		"general.architecture":                           "deepseek4",
		"general.file_type":                              uint32(38),
		"deepseek4.block_count":                          uint32(5),
		"deepseek4.embedding_length":                     uint32(128),
		"deepseek4.embedding_length_out":                 uint32(512),
		"deepseek4.expert_gating_func":                   uint32(4),
		"deepseek4.expert_count":                         uint32(16),
		"deepseek4.expert_used_count":                    uint32(4),
		"deepseek4.expert_weights_norm":                  true,
		"deepseek4.expert_weights_scale":                 float32(1.5),
		"deepseek4.hash_layer_count":                     uint32(3),
		"deepseek4.hyper_connection.count":               uint32(4),
		"deepseek4.hyper_connection.sinkhorn_iterations": uint32(20),
		"deepseek4.attention.sliding_window":             uint32(8),
		"deepseek4.attention.q_lora_rank":                uint32(128),
		"deepseek4.attention.output_group_count":         uint32(2),
		"deepseek4.attention.output_lora_rank":           uint32(64),
		"deepseek4.attention.indexer.top_k":              uint32(4),
		"deepseek4.attention.key_length":                 uint32(128),
		"deepseek4.attention.compress_rope_freq_base":    float32(160000),
		"deepseek4.rope.dimension_count":                 uint32(64),
		"deepseek4.rope.scaling.type":                    "yarn",
		"tokenizer.ggml.model":                           "gpt2",
		"tokenizer.ggml.pre":                             "deepseek-v3",
	}
	for k, v := range want {
		if got := h.KV[k]; got != v {
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
	if got := fmt.Sprint(h.KV["deepseek4.attention.compress_ratios"]); got != "[0 0 4 8 4]" {
		t.Errorf("compress_ratios %s", got)
	}
	if got := fmt.Sprint(h.KV["deepseek4.swiglu_clamp_exp"]); got != "[10 10 10 10 10]" {
		t.Errorf("swiglu_clamp_exp %s", got)
	}
	split, err := m.Files(200 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(split) < 2 {
		t.Fatalf("%d split files, want several", len(split))
	}
	n := 0
	for _, f := range split {
		n += len(readHeader(t, f).Tensors)
	}
	if n != len(m.Tensors) {
		t.Errorf("shards hold %d tensors, the model %d", n, len(m.Tensors))
	}
}

// TestDeepseek4Refuses checks that a config.json without a key the
// converter or llama.cpp needs stops the recipe with one line naming it.
func TestDeepseek4Refuses(t *testing.T) {
	for _, key := range []string{"num_key_value_heads", "max_position_embeddings", "norm_topk_prob", "compress_ratios"} {
		t.Run(key, func(t *testing.T) {
			cat := openV4(t)
			delete(cat.Config.Raw, key)
			_, err := recipe(t, "MXFP4").Plan(cat)
			if err == nil || !strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "\n") {
				t.Errorf("without %s: %v", key, err)
			}
		})
	}
}

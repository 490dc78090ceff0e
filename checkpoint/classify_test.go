package checkpoint

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/safetensors"
)

// want is the expected classification of one tensor.
type want struct {
	name   string
	dtype  safetensors.DType
	shape  []int64
	role   Role
	format Format
	layer  int
	expert int
	mtp    int
	proj   string
	block  [2]int64
	pair   string // the weight's Scale or the scale's ScaleOf
}

const (
	i8   = safetensors.I8
	e8m0 = safetensors.F8E8M0
	e4m3 = safetensors.F8E4M3
	bf16 = safetensors.BF16
	f32  = safetensors.F32
)

// v41 is a DeepSeek-V4.1 flat-name checkpoint: hidden 64, expert
// intermediate 32, FP8 block 32x32, MXFP4 experts, Engram in layer 1.
var v41 = []want{
	{"embed.weight", bf16, []int64{16, 64}, RoleEmbed, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"head.weight", bf16, []int64{16, 64}, RoleHead, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"norm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"hc_head_fn", f32, []int64{4, 64}, RoleMHC, FormatF32, -1, -1, -1, "", [2]int64{}, ""},
	{"layers.0.hc_attn_base", f32, []int64{4}, RoleMHC, FormatF32, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.attn_norm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.ffn_norm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.attn.wq_a.weight", e4m3, []int64{48, 64}, RoleAttention, FormatFP8, 0, -1, -1, "", [2]int64{32, 32}, "layers.0.attn.wq_a.scale"},
	{"layers.0.attn.wq_a.scale", e8m0, []int64{2, 2}, RoleAttention, FormatFP8Scale, 0, -1, -1, "", [2]int64{32, 32}, "layers.0.attn.wq_a.weight"},
	{"layers.0.attn.wo_b.weight", e4m3, []int64{64, 100}, RoleAttention, FormatFP8, 0, -1, -1, "", [2]int64{32, 32}, "layers.0.attn.wo_b.scale"},
	{"layers.0.attn.wo_b.scale", e8m0, []int64{2, 4}, RoleAttention, FormatFP8Scale, 0, -1, -1, "", [2]int64{32, 32}, "layers.0.attn.wo_b.weight"},
	{"layers.0.attn.q_norm.weight", bf16, []int64{48}, RoleAttention, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.attn.attn_sink", f32, []int64{4}, RoleAttention, FormatF32, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.ffn.gate.weight", bf16, []int64{8, 64}, RoleRouter, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.ffn.gate.bias", f32, []int64{8}, RoleRouter, FormatF32, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.ffn.gate.bias_vl", f32, []int64{8}, RoleRouter, FormatF32, 0, -1, -1, "", [2]int64{}, ""},
	{"layers.0.ffn.experts.3.w1.weight", i8, []int64{32, 32}, RoleRoutedExpert, FormatMXFP4, 0, 3, -1, "w1", [2]int64{}, "layers.0.ffn.experts.3.w1.scale"},
	{"layers.0.ffn.experts.3.w1.scale", e8m0, []int64{32, 2}, RoleRoutedExpert, FormatMXFP4Scale, 0, 3, -1, "w1", [2]int64{}, "layers.0.ffn.experts.3.w1.weight"},
	{"layers.0.ffn.experts.3.w2.weight", i8, []int64{64, 16}, RoleRoutedExpert, FormatMXFP4, 0, 3, -1, "w2", [2]int64{}, "layers.0.ffn.experts.3.w2.scale"},
	{"layers.0.ffn.experts.3.w2.scale", e8m0, []int64{64, 1}, RoleRoutedExpert, FormatMXFP4Scale, 0, 3, -1, "w2", [2]int64{}, "layers.0.ffn.experts.3.w2.weight"},
	{"layers.0.ffn.experts.3.w3.weight", i8, []int64{32, 32}, RoleRoutedExpert, FormatMXFP4, 0, 3, -1, "w3", [2]int64{}, "layers.0.ffn.experts.3.w3.scale"},
	{"layers.0.ffn.experts.3.w3.scale", e8m0, []int64{32, 2}, RoleRoutedExpert, FormatMXFP4Scale, 0, 3, -1, "w3", [2]int64{}, "layers.0.ffn.experts.3.w3.weight"},
	{"layers.12.ffn.experts.383.w1.weight", i8, []int64{32, 32}, RoleRoutedExpert, FormatMXFP4, 12, 383, -1, "w1", [2]int64{}, "layers.12.ffn.experts.383.w1.scale"},
	{"layers.12.ffn.experts.383.w1.scale", e8m0, []int64{32, 2}, RoleRoutedExpert, FormatMXFP4Scale, 12, 383, -1, "w1", [2]int64{}, "layers.12.ffn.experts.383.w1.weight"},
	// An I8 weight without a scale is no MXFP4: nothing could decode it.
	{"layers.12.ffn.experts.7.w1.weight", i8, []int64{32, 32}, RoleRoutedExpert, FormatOther, 12, 7, -1, "w1", [2]int64{}, ""},
	{"layers.0.ffn.shared_experts.w1.weight", e4m3, []int64{32, 64}, RoleSharedExpert, FormatFP8, 0, -1, -1, "w1", [2]int64{32, 32}, "layers.0.ffn.shared_experts.w1.scale"},
	{"layers.0.ffn.shared_experts.w1.scale", e8m0, []int64{1, 2}, RoleSharedExpert, FormatFP8Scale, 0, -1, -1, "w1", [2]int64{32, 32}, "layers.0.ffn.shared_experts.w1.weight"},
	{"layers.0.ffn.shared_experts.w2.weight", e4m3, []int64{64, 32}, RoleSharedExpert, FormatFP8, 0, -1, -1, "w2", [2]int64{32, 32}, "layers.0.ffn.shared_experts.w2.scale"},
	{"layers.0.ffn.shared_experts.w2.scale", e8m0, []int64{2, 1}, RoleSharedExpert, FormatFP8Scale, 0, -1, -1, "w2", [2]int64{32, 32}, "layers.0.ffn.shared_experts.w2.weight"},
	{"layers.1.engram.embed.weight", e4m3, []int64{5, 256}, RoleEngram, FormatFP8, 1, -1, -1, "", [2]int64{1, 32}, "layers.1.engram.embed.scale"},
	{"layers.1.engram.embed.scale", e8m0, []int64{5, 8}, RoleEngram, FormatFP8Scale, 1, -1, -1, "", [2]int64{1, 32}, "layers.1.engram.embed.weight"},
	{"layers.1.engram.q_weight", bf16, []int64{8, 64}, RoleEngramProj, FormatBF16, 1, -1, -1, "", [2]int64{}, ""},
	{"layers.1.ffn.w1.weight", e4m3, []int64{32, 64}, RoleDense, FormatFP8, 1, -1, -1, "w1", [2]int64{32, 32}, "layers.1.ffn.w1.scale"},
	{"layers.1.ffn.w1.scale", e8m0, []int64{1, 2}, RoleDense, FormatFP8Scale, 1, -1, -1, "w1", [2]int64{32, 32}, "layers.1.ffn.w1.weight"},
	{"mtp.0.ffn.experts.1.w2.weight", i8, []int64{64, 16}, RoleMTPExpert, FormatMXFP4, -1, 1, 0, "w2", [2]int64{}, "mtp.0.ffn.experts.1.w2.scale"},
	{"mtp.0.ffn.experts.1.w2.scale", e8m0, []int64{64, 1}, RoleMTPExpert, FormatMXFP4Scale, -1, 1, 0, "w2", [2]int64{}, "mtp.0.ffn.experts.1.w2.weight"},
	{"mtp.2.ffn.shared_experts.w3.weight", bf16, []int64{32, 64}, RoleSharedExpert, FormatBF16, -1, -1, 2, "w3", [2]int64{}, ""},
	{"mtp.0.attn.wkv.weight", e4m3, []int64{32, 64}, RoleAttention, FormatFP8, -1, -1, 0, "", [2]int64{32, 32}, "mtp.0.attn.wkv.scale"},
	{"mtp.0.attn.wkv.scale", e8m0, []int64{1, 2}, RoleAttention, FormatFP8Scale, -1, -1, 0, "", [2]int64{32, 32}, "mtp.0.attn.wkv.weight"},
	{"mtp.0.e_proj.weight", e4m3, []int64{64, 128}, RoleMTPProj, FormatFP8, -1, -1, 0, "", [2]int64{32, 32}, "mtp.0.e_proj.scale"},
	{"mtp.0.e_proj.scale", e8m0, []int64{2, 4}, RoleMTPProj, FormatFP8Scale, -1, -1, 0, "", [2]int64{32, 32}, "mtp.0.e_proj.weight"},
	{"mtp.0.enorm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, -1, -1, 0, "", [2]int64{}, ""},
	{"mtp.0.hc_head_fn", f32, []int64{4, 64}, RoleMHC, FormatF32, -1, -1, 0, "", [2]int64{}, ""},
	{"vision.blocks.0.attn.qkv.weight", bf16, []int64{8, 8}, RoleVision, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"vision_proj.weight", bf16, []int64{8, 8}, RoleVision, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"layers.0.orphan.scale", e8m0, []int64{4}, RoleOther, FormatE8M0, 0, -1, -1, "", [2]int64{}, ""},
}

// v3 is a DeepSeek-V3/R1 Hugging Face checkpoint with 2 layers and one MTP
// layer (model.layers.2), FP8 with F32 128x128 block scales.
var v3 = []want{
	{"model.embed_tokens.weight", bf16, []int64{16, 64}, RoleEmbed, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"lm_head.weight", bf16, []int64{16, 64}, RoleHead, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"model.norm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.input_layernorm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.post_attention_layernorm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.self_attn.q_a_proj.weight", e4m3, []int64{200, 130}, RoleAttention, FormatFP8, 0, -1, -1, "", [2]int64{128, 128}, "model.layers.0.self_attn.q_a_proj.weight_scale_inv"},
	{"model.layers.0.self_attn.q_a_proj.weight_scale_inv", f32, []int64{2, 2}, RoleAttention, FormatFP8Scale, 0, -1, -1, "", [2]int64{128, 128}, "model.layers.0.self_attn.q_a_proj.weight"},
	{"model.layers.0.self_attn.q_a_layernorm.weight", bf16, []int64{200}, RoleAttention, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", bf16, []int64{8, 64}, RoleAttention, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.mlp.gate_proj.weight", e4m3, []int64{256, 128}, RoleDense, FormatFP8, 0, -1, -1, "w1", [2]int64{128, 128}, "model.layers.0.mlp.gate_proj.weight_scale_inv"},
	{"model.layers.0.mlp.gate_proj.weight_scale_inv", f32, []int64{2, 1}, RoleDense, FormatFP8Scale, 0, -1, -1, "w1", [2]int64{128, 128}, "model.layers.0.mlp.gate_proj.weight"},
	{"model.layers.0.mlp.down_proj.weight", bf16, []int64{64, 256}, RoleDense, FormatBF16, 0, -1, -1, "w2", [2]int64{}, ""},
	{"model.layers.0.mlp.up_proj.weight", bf16, []int64{256, 64}, RoleDense, FormatBF16, 0, -1, -1, "w3", [2]int64{}, ""},
	{"model.layers.1.mlp.gate.weight", bf16, []int64{8, 64}, RoleRouter, FormatBF16, 1, -1, -1, "", [2]int64{}, ""},
	{"model.layers.1.mlp.gate.e_score_correction_bias", f32, []int64{8}, RoleRouter, FormatF32, 1, -1, -1, "", [2]int64{}, ""},
	{"model.layers.1.mlp.experts.5.up_proj.weight", e4m3, []int64{128, 128}, RoleRoutedExpert, FormatFP8, 1, 5, -1, "w3", [2]int64{128, 128}, "model.layers.1.mlp.experts.5.up_proj.weight_scale_inv"},
	{"model.layers.1.mlp.experts.5.up_proj.weight_scale_inv", f32, []int64{1, 1}, RoleRoutedExpert, FormatFP8Scale, 1, 5, -1, "w3", [2]int64{128, 128}, "model.layers.1.mlp.experts.5.up_proj.weight"},
	{"model.layers.1.mlp.experts.5.down_proj.weight", e4m3, []int64{130, 300}, RoleRoutedExpert, FormatFP8, 1, 5, -1, "w2", [2]int64{128, 128}, "model.layers.1.mlp.experts.5.down_proj.weight_scale_inv"},
	{"model.layers.1.mlp.experts.5.down_proj.weight_scale_inv", f32, []int64{2, 3}, RoleRoutedExpert, FormatFP8Scale, 1, 5, -1, "w2", [2]int64{128, 128}, "model.layers.1.mlp.experts.5.down_proj.weight"},
	{"model.layers.1.mlp.shared_experts.gate_proj.weight", bf16, []int64{32, 64}, RoleSharedExpert, FormatBF16, 1, -1, -1, "w1", [2]int64{}, ""},
	{"model.layers.2.mlp.experts.0.gate_proj.weight", e4m3, []int64{128, 128}, RoleMTPExpert, FormatFP8, 2, 0, 0, "w1", [2]int64{128, 128}, "model.layers.2.mlp.experts.0.gate_proj.weight_scale_inv"},
	{"model.layers.2.mlp.experts.0.gate_proj.weight_scale_inv", f32, []int64{1, 1}, RoleMTPExpert, FormatFP8Scale, 2, 0, 0, "w1", [2]int64{128, 128}, "model.layers.2.mlp.experts.0.gate_proj.weight"},
	{"model.layers.2.eh_proj.weight", bf16, []int64{64, 128}, RoleMTPProj, FormatBF16, 2, -1, 0, "", [2]int64{}, ""},
	{"model.layers.2.enorm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, 2, -1, 0, "", [2]int64{}, ""},
	{"model.layers.2.embed_tokens.weight", bf16, []int64{16, 64}, RoleEmbed, FormatBF16, 2, -1, 0, "", [2]int64{}, ""},
	{"model.layers.2.shared_head.head.weight", bf16, []int64{16, 64}, RoleHead, FormatBF16, 2, -1, 0, "", [2]int64{}, ""},
	{"model.layers.2.shared_head.norm.weight", bf16, []int64{64}, RoleNorm, FormatBF16, 2, -1, 0, "", [2]int64{}, ""},
}

// v2 is a DeepSeek-V2/V2-Lite checkpoint: the V3 names in BF16, no scales,
// no correction bias.
var v2 = []want{
	{"model.embed_tokens.weight", bf16, []int64{16, 64}, RoleEmbed, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.self_attn.q_proj.weight", bf16, []int64{64, 64}, RoleAttention, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.self_attn.kv_b_proj.weight", bf16, []int64{64, 16}, RoleAttention, FormatBF16, 0, -1, -1, "", [2]int64{}, ""},
	{"model.layers.0.mlp.up_proj.weight", bf16, []int64{128, 64}, RoleDense, FormatBF16, 0, -1, -1, "w3", [2]int64{}, ""},
	{"model.layers.1.mlp.gate.weight", bf16, []int64{8, 64}, RoleRouter, FormatBF16, 1, -1, -1, "", [2]int64{}, ""},
	{"model.layers.1.mlp.experts.0.gate_proj.weight", bf16, []int64{32, 64}, RoleRoutedExpert, FormatBF16, 1, 0, -1, "w1", [2]int64{}, ""},
	{"model.layers.1.mlp.experts.63.down_proj.weight", bf16, []int64{64, 32}, RoleRoutedExpert, FormatBF16, 1, 63, -1, "w2", [2]int64{}, ""},
	{"model.layers.1.mlp.shared_experts.up_proj.weight", bf16, []int64{64, 64}, RoleSharedExpert, FormatBF16, 1, -1, -1, "w3", [2]int64{}, ""},
	{"lm_head.weight", bf16, []int64{16, 64}, RoleHead, FormatBF16, -1, -1, -1, "", [2]int64{}, ""},
}

// buildCheckpoint writes the tensors of ws into two shards (alternately,
// so pairs cross shards too), an index and config, and opens it.
func buildCheckpoint(t *testing.T, config map[string]any, ws []want) *Catalog {
	t.Helper()
	dir := t.TempDir()
	shards := [2][]safetensors.Spec{}
	weightMap := make(map[string]string)
	for i, w := range ws {
		shards[i%2] = append(shards[i%2], spec(w.name, w.dtype, w.shape...))
		weightMap[w.name] = fmt.Sprintf("model-%05d-of-00002.safetensors", i%2+1)
	}
	for i, specs := range shards {
		writeShard(t, dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i+1), specs...)
	}
	writeIndex(t, dir, weightMap)
	writeJSON(t, dir, ConfigName, config)
	return mustOpen(t, dir)
}

func TestClassify(t *testing.T) {
	layouts := []struct {
		name    string
		config  map[string]any
		tensors []want
	}{
		{"v4.1", map[string]any{"model_type": "deepseek_v41", "num_hidden_layers": 13,
			"quantization_config": map[string]any{"quant_method": "fp8", "weight_block_size": []int{32, 32}, "scale_fmt": "ue8m0", "expert_dtype": "fp4"}}, v41},
		{"v3", map[string]any{"model_type": "deepseek_v3", "num_hidden_layers": 2, "num_nextn_predict_layers": 1,
			"quantization_config": map[string]any{"quant_method": "fp8", "weight_block_size": []int{128, 128}}}, v3},
		// Without weight_block_size the block is the power of two that fits.
		{"v3-no-block-size", map[string]any{"model_type": "deepseek_v3", "num_hidden_layers": 2}, v3},
		{"v2", map[string]any{"model_type": "deepseek_v2", "num_hidden_layers": 2}, v2},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			c := buildCheckpoint(t, l.config, l.tensors)
			if len(c.Problems) != 0 {
				t.Fatalf("problems: %v", c.Problems)
			}
			if len(c.Tensors) != len(l.tensors) {
				t.Fatalf("%d tensors catalogued, want %d", len(c.Tensors), len(l.tensors))
			}
			for _, w := range l.tensors {
				got := c.Tensor(w.name)
				if got == nil {
					t.Errorf("%s: not catalogued", w.name)
					continue
				}
				pair := ""
				if got.Scale != nil {
					pair = got.Scale.Name
				}
				if got.ScaleOf != nil {
					pair = got.ScaleOf.Name
				}
				g := want{got.Name, got.DType, got.Shape, got.Role, got.Format, got.Layer, got.Expert, got.MTP, got.Proj, got.Block, pair}
				if fmt.Sprint(g) != fmt.Sprint(w) {
					t.Errorf("got  %v\nwant %v", g, w)
				}
			}
		})
	}
}

func TestClassifyName(t *testing.T) {
	tests := []struct {
		name      string
		numLayers int
		want      nameClass
	}{
		{"model.layers.61.mlp.experts.3.down_proj.weight", 61, nameClass{RoleMTPExpert, 61, 3, 0, "w2"}},
		{"model.layers.61.mlp.experts.3.down_proj.weight", 0, nameClass{RoleRoutedExpert, 61, 3, -1, "w2"}},
		{"model.layers.60.mlp.experts.3.down_proj.weight", 61, nameClass{RoleRoutedExpert, 60, 3, -1, "w2"}},
		{"model.language_model.layers.2.self_attn.o_proj.weight", 4, nameClass{RoleAttention, 2, -1, -1, ""}},
		{"model.visual.blocks.0.norm1.weight", 4, nameClass{RoleVision, -1, -1, -1, ""}},
		{"multi_modal_projector.linear_1.weight", 4, nameClass{RoleVisionProjector, -1, -1, -1, ""}},
		{"layers.x.ffn.experts.1.w1.weight", 4, nameClass{RoleOther, -1, -1, -1, ""}},
		{"layers.1.ffn.experts.e.w1.weight", 4, nameClass{RoleOther, 1, -1, -1, ""}},
		{"layers.+1.attn.wq_a.weight", 4, nameClass{RoleOther, -1, -1, -1, ""}},
		{"layers.1.ffn.gate.tid2eid", 4, nameClass{RoleRouter, 1, -1, -1, ""}},
		{"layers.1.attn.compressor.wkv.weight", 4, nameClass{RoleAttention, 1, -1, -1, ""}},
		{"mtp.2.markov_head.head.weight", 4, nameClass{RoleDraftHead, -1, -1, 2, ""}},
		{"", 4, nameClass{RoleOther, -1, -1, -1, ""}},
		{"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.norm", 4, nameClass{RoleNorm, -1, -1, -1, ""}},
		{"layers.99999999999999999999.attn.wq.weight", 4, nameClass{RoleOther, -1, -1, -1, ""}},
	}
	for _, tt := range tests {
		if got := classifyName(tt.name, tt.numLayers); got != tt.want {
			t.Errorf("classifyName(%q, %d) = %v, want %v", tt.name, tt.numLayers, got, tt.want)
		}
	}
}

func TestFP8Block(t *testing.T) {
	tests := []struct {
		weight, scale []int64
		pref          [2]int64
		want          [2]int64
		ok            bool
	}{
		{[]int64{7168, 2048}, []int64{56, 16}, [2]int64{128, 128}, [2]int64{128, 128}, true},
		{[]int64{7168, 2048}, []int64{56, 16}, [2]int64{}, [2]int64{128, 128}, true},
		{[]int64{4096, 4096}, []int64{128, 128}, [2]int64{32, 32}, [2]int64{32, 32}, true},
		{[]int64{1000, 4096}, []int64{1000, 128}, [2]int64{32, 32}, [2]int64{1, 32}, true},
		{[]int64{100, 100}, []int64{1, 1}, [2]int64{}, [2]int64{128, 128}, true},
		// The config's block wins whenever it fits, power of two or not.
		{[]int64{100, 100}, []int64{1, 1}, [2]int64{100, 100}, [2]int64{100, 100}, true},
		{[]int64{100, 96}, []int64{4, 3}, [2]int64{}, [2]int64{32, 32}, true},
		{[]int64{64, 64}, []int64{3, 3}, [2]int64{}, [2]int64{}, false},
		{[]int64{64, 64}, []int64{65, 2}, [2]int64{}, [2]int64{}, false},
		{[]int64{64, 64}, []int64{0, 2}, [2]int64{}, [2]int64{}, false},
		{[]int64{0, 64}, []int64{0, 2}, [2]int64{}, [2]int64{1, 32}, true},
		{[]int64{64}, []int64{2}, [2]int64{}, [2]int64{}, false},
		{[]int64{64, 64}, []int64{2, 2}, [2]int64{1 << 62, 1 << 62}, [2]int64{32, 32}, true},
	}
	for _, tt := range tests {
		got, ok := fp8Block(tt.weight, tt.scale, tt.pref)
		if got != tt.want || ok != tt.ok {
			t.Errorf("fp8Block(%v, %v, %v) = %v, %v; want %v, %v", tt.weight, tt.scale, tt.pref, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMXFP4ScaleFits(t *testing.T) {
	tests := []struct {
		weight, scale []int64
		want          bool
	}{
		{[]int64{2304, 2560}, []int64{2304, 160}, true},
		{[]int64{5120, 1152}, []int64{5120, 72}, true},
		{[]int64{4, 384, 16}, []int64{4, 384, 1}, true},
		{[]int64{2304, 2560}, []int64{2304, 80}, false},
		{[]int64{2304, 2560}, []int64{2303, 160}, false},
		{[]int64{2304, 8}, []int64{2304, 0}, false}, // 16 elements: not a whole block
		{[]int64{2304, 2560}, []int64{2304 * 160}, false},
		{[]int64{}, []int64{}, false},
	}
	for _, tt := range tests {
		if got := mxfp4ScaleFits(tt.weight, tt.scale); got != tt.want {
			t.Errorf("mxfp4ScaleFits(%v, %v) = %v, want %v", tt.weight, tt.scale, got, tt.want)
		}
	}
}

// TestPairAcrossDTypes checks that a scale beside a weight it cannot
// belong to is reported on the scale and both stay unpaired.
func TestPairAcrossDTypes(t *testing.T) {
	tests := []struct {
		weight, scale safetensors.Spec
		reason        string
	}{
		{spec("w.weight", i8, 32, 32), spec("w.scale", e8m0, 32, 3), "MXFP4 scale shape [32 3]"},
		{spec("w.weight", i8, 32, 32), spec("w.scale", f32, 32, 2), "a F32 scale does not fit the I8 weight"},
		{spec("w.weight", e4m3, 64, 64), spec("w.scale", e8m0, 3, 3), "FP8 scale shape [3 3]"},
		{spec("w.weight", e4m3, 64, 64), spec("w.weight_scale_inv", bf16, 2, 2), "a BF16 scale does not fit"},
		{spec("w.weight", bf16, 64, 64), spec("w.scale", f32, 2, 2), "does not fit the BF16 weight"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		writeJSON(t, dir, ConfigName, map[string]any{})
		writeShard(t, dir, singleName, tt.weight, tt.scale)
		c := mustOpen(t, dir)
		if len(c.Problems) != 1 || c.Problems[0].Tensor != tt.scale.Name || !strings.Contains(c.Problems[0].Reason, tt.reason) {
			t.Errorf("%v + %v: problems %v, want one on %s saying %q", tt.weight, tt.scale, c.Problems, tt.scale.Name, tt.reason)
			continue
		}
		w, s := c.Tensor(tt.weight.Name), c.Tensor(tt.scale.Name)
		if w.Scale != nil || s.ScaleOf != nil || slices.Contains([]Format{FormatMXFP4, FormatFP8}, w.Format) {
			t.Errorf("%v + %v: weight %+v left paired or quantised", tt.weight, tt.scale, w)
		}
	}
}

// TestClassifyNameRandom classifies names generated from each layout's
// grammar with random positions.
func TestClassifyNameRandom(t *testing.T) {
	seed := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	projs := []struct{ flat, hf, want string }{{"w1", "gate_proj", "w1"}, {"w2", "down_proj", "w2"}, {"w3", "up_proj", "w3"}}
	for range 20000 {
		layers := 1 + r.IntN(100)
		layer, expert, mtp := r.IntN(layers+3), r.IntN(1000), r.IntN(5)
		p := projs[r.IntN(3)]
		param := []string{"weight", "scale", "weight_scale_inv"}[r.IntN(3)]
		var name string
		want := nameClass{RoleRoutedExpert, layer, expert, -1, p.want}
		switch r.IntN(4) {
		case 0: // V4 flat layer
			name = fmt.Sprintf("layers.%d.ffn.experts.%d.%s.%s", layer, expert, p.flat, param)
		case 1: // V4 flat MTP block
			name = fmt.Sprintf("mtp.%d.ffn.experts.%d.%s.%s", mtp, expert, p.flat, param)
			want.layer, want.mtp, want.role = -1, mtp, RoleMTPExpert
		case 2: // Hugging Face
			name = fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.%s", layer, expert, p.hf, param)
		case 3: // shared experts carry no expert index
			name = fmt.Sprintf("model.layers.%d.mlp.shared_experts.%s.%s", layer, p.hf, param)
			want.role, want.expert = RoleSharedExpert, -1
		}
		if want.layer >= layers {
			want.mtp = want.layer - layers
			if want.role == RoleRoutedExpert {
				want.role = RoleMTPExpert
			}
		}
		if got := classifyName(name, layers); got != want {
			t.Fatalf("seed %d: classifyName(%q, %d) = %v, want %v", seed, name, layers, got, want)
		}
	}
}

// TestFP8BlockRandom checks block inference on random shapes: the
// config's block is found whenever it fits, and without one the block
// found always reproduces the scale shape.
func TestFP8BlockRandom(t *testing.T) {
	seed := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	for range 20000 {
		w := []int64{1 + r.Int64N(20000), 1 + r.Int64N(20000)}
		block := [2]int64{1 << r.IntN(9), 1 << r.IntN(9)}
		scale := []int64{ceilDiv(w[0], block[0]), ceilDiv(w[1], block[1])}
		if got, ok := fp8Block(w, scale, block); !ok || got != block {
			t.Fatalf("seed %d: fp8Block(%v, %v, %v) = %v, %v", seed, w, scale, block, got, ok)
		}
		got, ok := fp8Block(w, scale, [2]int64{})
		if !ok || ceilDiv(w[0], got[0]) != scale[0] || ceilDiv(w[1], got[1]) != scale[1] || got[0] > block[0] || got[1] > block[1] {
			t.Fatalf("seed %d: fp8Block(%v, %v) = %v, %v; want a block no larger than %v giving the scale shape", seed, w, scale, got, ok, block)
		}
	}
}

// TestFindTensorRandom looks up random names split anywhere into prefix
// and suffix, and names that are absent.
func TestFindTensorRandom(t *testing.T) {
	seed := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	const alphabet = "ab.1"
	randName := func() string {
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	set := make(map[string]bool)
	for range 200 {
		set[randName()] = true
	}
	var ts []*Tensor
	for n := range set {
		ts = append(ts, &Tensor{Name: n})
	}
	slices.SortFunc(ts, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })
	for range 5000 {
		n := randName()
		cut := r.IntN(len(n) + 1)
		got := findTensor(ts, n[:cut], n[cut:])
		if set[n] != (got != nil) || (got != nil && got.Name != n) {
			t.Fatalf("seed %d: findTensor(%q, %q) = %v, present %v", seed, n[:cut], n[cut:], got, set[n])
		}
	}
}

// TestClassifyReleasedPatterns gives the role of one tensor of each name
// pattern of DeepSeek-V4.1-Flash (the 114 of LAYOUTS.md §5, in its order)
// and of each pattern only DeepSeek-V4-Flash has; none is other.
func TestClassifyReleasedPatterns(t *testing.T) {
	tests := []struct {
		name string
		want Role
	}{
		// DeepSeek-V4.1-Flash.
		{"vision.patch_embed.proj.weight", RoleVision},
		{"vision.patch_embed.proj.bias", RoleVision},
		{"vision.blocks.31.norm1.weight", RoleVision},
		{"vision.blocks.31.norm2.weight", RoleVision},
		{"vision.blocks.31.attn.wqkv.weight", RoleVision},
		{"vision.blocks.31.attn.wqkv.bias", RoleVision},
		{"vision.blocks.31.attn.wo.weight", RoleVision},
		{"vision.blocks.31.attn.wo.bias", RoleVision},
		{"vision.blocks.31.mlp.w1.weight", RoleVision},
		{"vision.blocks.31.mlp.w2.weight", RoleVision},
		{"vision.norm.weight", RoleVision},
		{"aligner.w1.weight", RoleVisionProjector},
		{"aligner.w1.bias", RoleVisionProjector},
		{"aligner.w2.weight", RoleVisionProjector},
		{"aligner.w2.bias", RoleVisionProjector},
		{"embed.weight", RoleEmbed},
		{"image_start", RoleImageToken},
		{"image_newline", RoleImageToken},
		{"image_end", RoleImageToken},
		{"layers.14.hc_attn_fn", RoleMHC},
		{"layers.14.hc_attn_base", RoleMHC},
		{"layers.14.hc_attn_scale", RoleMHC},
		{"layers.14.hc_ffn_fn", RoleMHC},
		{"layers.14.hc_ffn_base", RoleMHC},
		{"layers.14.hc_ffn_scale", RoleMHC},
		{"layers.14.attn_norm.weight", RoleNorm},
		{"layers.14.ffn_norm.weight", RoleNorm},
		{"layers.14.attn.q_norm.weight", RoleAttention},
		{"layers.14.attn.kv_norm.weight", RoleAttention},
		{"layers.14.attn.attn_sink", RoleAttention},
		{"layers.14.attn.wq_a.weight", RoleAttention},
		{"layers.14.attn.wq_a.scale", RoleAttention},
		{"layers.14.attn.wq_b.weight", RoleAttention},
		{"layers.14.attn.wq_b.scale", RoleAttention},
		{"layers.14.attn.wkv.weight", RoleAttention},
		{"layers.14.attn.wkv.scale", RoleAttention},
		{"layers.14.attn.wo_a.weight", RoleAttention},
		{"layers.14.attn.wo_a.scale", RoleAttention},
		{"layers.14.attn.wo_b.weight", RoleAttention},
		{"layers.14.attn.wo_b.scale", RoleAttention},
		{"layers.14.ffn.gate.weight", RoleRouter},
		{"layers.14.ffn.gate.bias", RoleRouter},
		{"layers.14.ffn.gate.bias_vl", RoleRouter},
		{"layers.14.ffn.shared_experts.w1.weight", RoleSharedExpert},
		{"layers.14.ffn.shared_experts.w1.scale", RoleSharedExpert},
		{"layers.14.ffn.shared_experts.w2.weight", RoleSharedExpert},
		{"layers.14.ffn.shared_experts.w2.scale", RoleSharedExpert},
		{"layers.14.ffn.shared_experts.w3.weight", RoleSharedExpert},
		{"layers.14.ffn.shared_experts.w3.scale", RoleSharedExpert},
		{"layers.14.ffn.experts.383.w1.weight", RoleRoutedExpert},
		{"layers.14.ffn.experts.383.w1.scale", RoleRoutedExpert},
		{"layers.14.ffn.experts.383.w2.weight", RoleRoutedExpert},
		{"layers.14.ffn.experts.383.w2.scale", RoleRoutedExpert},
		{"layers.14.ffn.experts.383.w3.weight", RoleRoutedExpert},
		{"layers.14.ffn.experts.383.w3.scale", RoleRoutedExpert},
		{"layers.14.engram.embed.weight", RoleEngram},
		{"layers.14.engram.embed.scale", RoleEngram},
		{"layers.14.engram.q_weight", RoleEngramProj},
		{"layers.14.engram.k_weight", RoleEngramProj},
		{"layers.14.engram.wkv.weight", RoleEngramProj},
		{"layers.14.engram.wkv.scale", RoleEngramProj},
		{"layers.14.attn.compressor.norm.weight", RoleAttention},
		{"layers.14.attn.compressor.wkv.weight", RoleAttention},
		{"layers.14.attn.compressor.wgate.weight", RoleAttention},
		{"layers.14.attn.indexer.wq_b.weight", RoleAttention},
		{"layers.14.attn.indexer.wq_b.scale", RoleAttention},
		{"layers.14.attn.indexer.weights_proj.weight", RoleAttention},
		{"layers.14.attn.indexer.wk.weight", RoleAttention},
		{"layers.14.attn.indexer.k_norm.weight", RoleAttention},
		{"head.weight", RoleHead},
		{"norm.weight", RoleNorm},
		{"mtp.2.hc_attn_fn", RoleMHC},
		{"mtp.2.hc_attn_base", RoleMHC},
		{"mtp.2.hc_attn_scale", RoleMHC},
		{"mtp.2.hc_ffn_fn", RoleMHC},
		{"mtp.2.hc_ffn_base", RoleMHC},
		{"mtp.2.hc_ffn_scale", RoleMHC},
		{"mtp.2.attn_norm.weight", RoleNorm},
		{"mtp.2.ffn_norm.weight", RoleNorm},
		{"mtp.2.attn.q_norm.weight", RoleAttention},
		{"mtp.2.attn.kv_norm.weight", RoleAttention},
		{"mtp.2.attn.attn_sink", RoleAttention},
		{"mtp.2.attn.wq_a.weight", RoleAttention},
		{"mtp.2.attn.wq_a.scale", RoleAttention},
		{"mtp.2.attn.wq_b.weight", RoleAttention},
		{"mtp.2.attn.wq_b.scale", RoleAttention},
		{"mtp.2.attn.wkv.weight", RoleAttention},
		{"mtp.2.attn.wkv.scale", RoleAttention},
		{"mtp.2.attn.wo_a.weight", RoleAttention},
		{"mtp.2.attn.wo_a.scale", RoleAttention},
		{"mtp.2.attn.wo_b.weight", RoleAttention},
		{"mtp.2.attn.wo_b.scale", RoleAttention},
		{"mtp.2.ffn.gate.weight", RoleRouter},
		{"mtp.2.ffn.gate.bias", RoleRouter},
		{"mtp.2.ffn.gate.bias_vl", RoleRouter},
		{"mtp.2.ffn.shared_experts.w1.weight", RoleSharedExpert},
		{"mtp.2.ffn.shared_experts.w1.scale", RoleSharedExpert},
		{"mtp.2.ffn.shared_experts.w2.weight", RoleSharedExpert},
		{"mtp.2.ffn.shared_experts.w2.scale", RoleSharedExpert},
		{"mtp.2.ffn.shared_experts.w3.weight", RoleSharedExpert},
		{"mtp.2.ffn.shared_experts.w3.scale", RoleSharedExpert},
		{"mtp.2.ffn.experts.383.w1.weight", RoleMTPExpert},
		{"mtp.2.ffn.experts.383.w1.scale", RoleMTPExpert},
		{"mtp.2.ffn.experts.383.w2.weight", RoleMTPExpert},
		{"mtp.2.ffn.experts.383.w2.scale", RoleMTPExpert},
		{"mtp.2.ffn.experts.383.w3.weight", RoleMTPExpert},
		{"mtp.2.ffn.experts.383.w3.scale", RoleMTPExpert},
		{"mtp.0.main_proj.weight", RoleMTPProj},
		{"mtp.0.main_proj.scale", RoleMTPProj},
		{"mtp.0.main_norm.weight", RoleNorm},
		{"mtp.2.norm.weight", RoleNorm},
		{"mtp.2.markov_head.embed.weight", RoleDraftHead},
		{"mtp.2.markov_head.head.weight", RoleDraftHead},
		{"mtp.2.confidence_head.proj.weight", RoleDraftHead},
		// DeepSeek-V4-Flash only.
		{"hc_head_base", RoleMHC},
		{"hc_head_fn", RoleMHC},
		{"hc_head_scale", RoleMHC},
		{"layers.14.attn.compressor.ape", RoleAttention},
		{"layers.14.attn.indexer.compressor.ape", RoleAttention},
		{"layers.14.attn.indexer.compressor.norm.weight", RoleAttention},
		{"layers.14.attn.indexer.compressor.wgate.weight", RoleAttention},
		{"layers.14.attn.indexer.compressor.wkv.weight", RoleAttention},
		{"layers.14.ffn.gate.tid2eid", RoleRouter},
		{"mtp.0.e_proj.scale", RoleMTPProj},
		{"mtp.0.e_proj.weight", RoleMTPProj},
		{"mtp.0.enorm.weight", RoleNorm},
		{"mtp.0.h_proj.scale", RoleMTPProj},
		{"mtp.0.h_proj.weight", RoleMTPProj},
		{"mtp.0.hc_head_base", RoleMHC},
		{"mtp.0.hc_head_fn", RoleMHC},
		{"mtp.0.hc_head_scale", RoleMHC},
		{"mtp.0.hnorm.weight", RoleNorm},
	}
	if len(tests) != 114+18 {
		t.Fatalf("%d patterns, want 114 + 18", len(tests))
	}
	for _, tt := range tests {
		if got := classifyName(tt.name, 40).role; got != tt.want {
			t.Errorf("%s: role %s, want %s", tt.name, got, tt.want)
		}
	}
}

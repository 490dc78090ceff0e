package synth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
)

// MLASpec describes a synthetic DeepSeek-V2 or V3 checkpoint (multi-head
// latent attention, mixture of experts) in Hugging Face naming, as the
// released V2-Lite and V3 checkpoints lay it out: every tensor BF16 except
// V3's F32 router correction bias. Values are drawn the way the trace
// reference checkpoints were (testdata/trace): linear weights
// N(0, 1/fan_in), RMSNorm weights 1 + N(0, 0.1²), embeddings N(0, 1), the
// correction bias N(0, 0.1²), so attention and routing are far from
// uniform. With a vocabulary of at least 259 it also writes a byte-level
// BPE tokenizer.json of that size (tokenizer.Synthesize).
type MLASpec struct {
	Seed uint64
	// V3 selects DeepSeek-V3's router (sigmoid scores with a correction
	// bias, group-limited noaux_tc top-k, renormalised and scaled
	// weights) and q LoRA; otherwise DeepSeek-V2-Lite's (softmax, greedy
	// top-k, raw weights) with a direct q_proj.
	V3 bool

	Hidden, Vocab, Layers, DenseLayers int
	Inter, MoEInter                    int // dense FFN and routed expert widths
	Heads, QLoRA, KVLoRA               int // QLoRA is used by V3 only
	QKNope, QKRope, VHead              int
	Experts, TopK, Shared              int
	Groups, TopKGroups                 int
	RoutedScale                        float64

	// MaxShardBytes cuts the tensors, in state-dict order, into shards of
	// at most this many bytes (a tensor larger than that gets its own).
	MaxShardBytes int64
}

// mlaTensor is one tensor of an MLA checkpoint and how to fill it.
type mlaTensor struct {
	name  string
	shape []int64
	kind  mlaKind
}

type mlaKind int

const (
	mlaLinear mlaKind = iota // BF16 N(0, 1/fan_in)
	mlaNorm                  // BF16 1 + N(0, 0.01)
	mlaEmbed                 // BF16 N(0, 1)
	mlaBias                  // F32 N(0, 0.01)
)

// Validate reports the first thing in s that cannot be laid out.
func (s *MLASpec) Validate() error {
	for _, v := range []int{s.Hidden, s.Vocab, s.Layers, s.Heads, s.KVLoRA, s.QKNope, s.QKRope, s.VHead} {
		if v <= 0 {
			return errors.New("synth: MLA sizes must be positive")
		}
	}
	switch {
	case s.DenseLayers < 0 || s.DenseLayers > s.Layers:
		return fmt.Errorf("synth: DenseLayers %d outside [0, %d]", s.DenseLayers, s.Layers)
	case s.DenseLayers > 0 && s.Inter <= 0:
		return errors.New("synth: dense layers need Inter")
	case s.DenseLayers < s.Layers && (s.Experts <= 0 || s.MoEInter <= 0 || s.TopK <= 0 || s.TopK > s.Experts):
		return errors.New("synth: MoE layers need Experts, MoEInter and TopK in [1, Experts]")
	case s.Groups <= 0 || s.Experts%s.Groups != 0 || s.TopKGroups <= 0 || s.TopKGroups > s.Groups:
		return fmt.Errorf("synth: %d groups of %d experts, %d kept", s.Groups, s.Experts, s.TopKGroups)
	case s.V3 && s.QLoRA <= 0:
		return errors.New("synth: V3 needs QLoRA")
	case s.QKRope%2 != 0:
		return errors.New("synth: QKRope must be even")
	}
	return nil
}

// tensors lists the checkpoint's tensors in Hugging Face state-dict order.
func (s *MLASpec) tensors() []mlaTensor {
	h := int64(s.Hidden)
	lin := func(name string, out, in int) mlaTensor {
		return mlaTensor{name, []int64{int64(out), int64(in)}, mlaLinear}
	}
	norm := func(name string, n int) mlaTensor { return mlaTensor{name, []int64{int64(n)}, mlaNorm} }
	ts := []mlaTensor{{"model.embed_tokens.weight", []int64{int64(s.Vocab), h}, mlaEmbed}}
	qk := s.QKNope + s.QKRope
	mlp := func(p string, inter int) []mlaTensor {
		return []mlaTensor{lin(p+".gate_proj.weight", inter, s.Hidden), lin(p+".up_proj.weight", inter, s.Hidden), lin(p+".down_proj.weight", s.Hidden, inter)}
	}
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		if s.V3 {
			ts = append(ts, lin(p+"self_attn.q_a_proj.weight", s.QLoRA, s.Hidden), norm(p+"self_attn.q_a_layernorm.weight", s.QLoRA),
				lin(p+"self_attn.q_b_proj.weight", s.Heads*qk, s.QLoRA))
		} else {
			ts = append(ts, lin(p+"self_attn.q_proj.weight", s.Heads*qk, s.Hidden))
		}
		ts = append(ts,
			lin(p+"self_attn.kv_a_proj_with_mqa.weight", s.KVLoRA+s.QKRope, s.Hidden),
			norm(p+"self_attn.kv_a_layernorm.weight", s.KVLoRA),
			lin(p+"self_attn.kv_b_proj.weight", s.Heads*(s.QKNope+s.VHead), s.KVLoRA),
			lin(p+"self_attn.o_proj.weight", s.Hidden, s.Heads*s.VHead))
		if l < s.DenseLayers {
			ts = append(ts, mlp(p+"mlp", s.Inter)...)
		} else {
			for e := range s.Experts {
				ts = append(ts, mlp(fmt.Sprintf("%smlp.experts.%d", p, e), s.MoEInter)...)
			}
			ts = append(ts, lin(p+"mlp.gate.weight", s.Experts, s.Hidden))
			if s.V3 {
				ts = append(ts, mlaTensor{p + "mlp.gate.e_score_correction_bias", []int64{int64(s.Experts)}, mlaBias})
			}
			if s.Shared > 0 {
				ts = append(ts, mlp(p+"mlp.shared_experts", s.Shared*s.MoEInter)...)
			}
		}
		ts = append(ts, norm(p+"input_layernorm.weight", s.Hidden), norm(p+"post_attention_layernorm.weight", s.Hidden))
	}
	return append(ts, norm("model.norm.weight", s.Hidden), lin("lm_head.weight", s.Vocab, s.Hidden))
}

// shards cuts the tensors, in state-dict order, into the shards WriteMLA
// writes: a shard is closed before a tensor would take it past
// MaxShardBytes, and a tensor larger than that gets one of its own.
func (s *MLASpec) shards() [][]mlaTensor {
	var shards [][]mlaTensor
	var size int64
	for _, t := range s.tensors() {
		n := t.bytes()
		if len(shards) == 0 || size > 0 && size+n > s.MaxShardBytes {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], t)
		size += n
	}
	return shards
}

// bytes is the size of the tensor's data.
func (t *mlaTensor) bytes() int64 {
	n := int64(t.dtype().Bits() / 8)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

func (t *mlaTensor) dtype() safetensors.DType {
	if t.kind == mlaBias {
		return safetensors.F32
	}
	return safetensors.BF16
}

// data draws the tensor's values from the shared normal table with a PRNG
// seeded by the spec's seed and the tensor's name, so a tensor's bytes do
// not depend on the others.
func (t *mlaTensor) data(seed uint64) []byte {
	n := int64(1)
	for _, d := range t.shape {
		n *= d
	}
	normal := &getTables().normal
	rng := rand.New(rand.NewPCG(nameSeed(seed, t.name), 0x6d6c61)) // "mla"
	draw := func() float64 { return normal[rng.Uint64()>>48] }
	if t.kind == mlaBias {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(0.1*draw())))
		}
		return b
	}
	b := make([]byte, 2*n)
	std, offset := 1.0, 0.0
	switch t.kind {
	case mlaLinear:
		std = 1 / math.Sqrt(float64(t.shape[1]))
	case mlaNorm:
		std, offset = 0.1, 1
	}
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], codecs.Float32ToBF16(float32(offset+std*draw())))
	}
	return b
}

// config is the Hugging Face config.json of the checkpoint, with the keys
// and values of the released V2-Lite (deepseek_v2) or V3 (deepseek_v3)
// configs where the spec does not set them.
func (s *MLASpec) config() map[string]any {
	c := map[string]any{
		"attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
		"bos_token_id": 0, "eos_token_id": 1, "first_k_dense_replace": s.DenseLayers,
		"hidden_act": "silu", "hidden_size": s.Hidden, "initializer_range": 0.02,
		"intermediate_size": s.Inter, "kv_lora_rank": s.KVLoRA, "max_position_embeddings": 163840,
		"moe_intermediate_size": s.MoEInter, "moe_layer_freq": 1, "n_group": s.Groups,
		"n_routed_experts": s.Experts, "n_shared_experts": s.Shared,
		"num_attention_heads": s.Heads, "num_experts_per_tok": s.TopK, "num_hidden_layers": s.Layers,
		"num_key_value_heads": s.Heads, "pretraining_tp": 1,
		"qk_nope_head_dim": s.QKNope, "qk_rope_head_dim": s.QKRope, "rms_norm_eps": 1e-6,
		"rope_theta": 10000, "routed_scaling_factor": s.RoutedScale, "seq_aux": true,
		"tie_word_embeddings": false, "topk_group": s.TopKGroups, "torch_dtype": "bfloat16",
		"transformers_version": "4.33.1", "use_cache": true, "v_head_dim": s.VHead, "vocab_size": s.Vocab,
	}
	rope := map[string]any{"beta_fast": 32, "beta_slow": 1, "factor": 40, "original_max_position_embeddings": 4096, "type": "yarn"}
	if s.V3 {
		c["architectures"] = []string{"DeepseekV3ForCausalLM"}
		c["model_type"] = "deepseek_v3"
		c["auto_map"] = autoMap("DeepseekV3")
		c["ep_size"] = 1
		c["norm_topk_prob"] = true
		c["num_nextn_predict_layers"] = 0
		c["q_lora_rank"] = s.QLoRA
		c["scoring_func"] = "sigmoid"
		c["topk_method"] = "noaux_tc"
		rope["mscale"], rope["mscale_all_dim"] = 1.0, 1.0
	} else {
		c["architectures"] = []string{"DeepseekV2ForCausalLM"}
		c["model_type"] = "deepseek_v2"
		c["auto_map"] = autoMap("DeepseekV2")
		c["norm_topk_prob"] = false
		c["q_lora_rank"] = nil
		c["scoring_func"] = "softmax"
		c["topk_method"] = "greedy"
		rope["mscale"], rope["mscale_all_dim"] = 0.707, 0.707
	}
	c["rope_scaling"] = rope
	return c
}

func autoMap(prefix string) map[string]string {
	return map[string]string{
		"AutoConfig":           "configuration_deepseek." + prefix + "Config",
		"AutoModel":            "modeling_deepseek." + prefix + "Model",
		"AutoModelForCausalLM": "modeling_deepseek." + prefix + "ForCausalLM",
	}
}

// tokenizerBase is the vocabulary of tokenizer.Synthesize without merges:
// three special tokens and the 256 bytes.
const tokenizerBase = 259

// WriteMLA writes the checkpoint s describes into dir (created if
// missing): shards model-NNNNN-of-MMMMM.safetensors, the index,
// config.json, and with a vocabulary of at least 259 tokens
// tokenizer.json and tokenizer_config.json. The same spec always gives the
// same bytes.
func WriteMLA(s MLASpec, dir string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	shards := s.shards()
	ix := index{WeightMap: make(map[string]string)}
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		tensors := make([]Tensor, len(sh))
		for j, t := range sh {
			tensors[j] = Tensor{Name: t.name, DType: t.dtype(), Shape: t.shape, Data: t.data(s.Seed)}
			ix.WeightMap[t.name] = name
			ix.Metadata.TotalSize += int64(len(tensors[j].Data))
		}
		if err := WriteShard(filepath.Join(dir, name), shardMeta, tensors); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, IndexName), ix); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), s.config()); err != nil {
		return err
	}
	if s.Vocab < tokenizerBase {
		return nil
	}
	return WriteTokenizer(dir, s.Vocab)
}

// WriteTokenizer writes into dir the tokenizer.json of tokenizer.Synthesize
// for a vocabulary of vocab ids (at least 259: its byte and special
// tokens) and its tokenizer_config.json, the files gguf/ and trace/ read
// beside a checkpoint.
func WriteTokenizer(dir string, vocab int) error {
	tok, err := tokenizer.Synthesize(vocab - tokenizerBase)
	if err != nil {
		return fmt.Errorf("synth: tokenizer.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tokenizer.SynthesizeConfig(), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// V2LiteTinySpec is the v2lite-tiny preset: DeepSeek-V2-Lite's layout and
// routing made small, the shapes of testdata/trace/v2lite-tiny.
func V2LiteTinySpec() MLASpec {
	return MLASpec{
		Seed: 4, Hidden: 128, Vocab: 512, Layers: 4, DenseLayers: 1, Inter: 384, MoEInter: 64,
		Heads: 4, KVLoRA: 64, QKNope: 32, QKRope: 16, VHead: 32,
		Experts: 8, TopK: 3, Shared: 2, Groups: 1, TopKGroups: 1, RoutedScale: 1,
		MaxShardBytes: 1300 << 10,
	}
}

// V3TinySpec is the v3-tiny preset: DeepSeek-V3's layout and routing made
// small, the shapes of testdata/trace/v3-tiny.
func V3TinySpec() MLASpec {
	return MLASpec{
		Seed: 5, V3: true, Hidden: 128, Vocab: 512, Layers: 4, DenseLayers: 1, Inter: 384, MoEInter: 48,
		Heads: 4, QLoRA: 96, KVLoRA: 64, QKNope: 32, QKRope: 16, VHead: 32,
		Experts: 16, TopK: 4, Shared: 1, Groups: 4, TopKGroups: 2, RoutedScale: 2.5,
		MaxShardBytes: 1550 << 10,
	}
}

// shardMeta is the __metadata__ of a V2/V3 shard, as torch's save_file
// writes it through save_pretrained.
var shardMeta = []safetensors.Meta{{Key: "format", Value: "pt"}}

package gguf

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/safetensors"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// v4Config is the part of a DeepSeek-V4 config.json the deepseek4 recipe
// reads: the hyper-parameters llama.cpp's converter (DeepseekV4Model)
// writes as metadata.
type v4Config struct {
	Layers         int     `json:"num_hidden_layers"`
	MaxPos         int     `json:"max_position_embeddings"`
	Hidden         int     `json:"hidden_size"`
	Heads          int     `json:"num_attention_heads"`
	KVHeads        int     `json:"num_key_value_heads"`
	HeadDim        int     `json:"head_dim"`
	RopeTheta      float64 `json:"rope_theta"`
	RMSNormEps     float64 `json:"rms_norm_eps"`
	Experts        int     `json:"n_routed_experts"`
	TopK           int     `json:"num_experts_per_tok"`
	ScoringFunc    string  `json:"scoring_func"`
	RopeDim        int     `json:"qk_rope_head_dim"`
	QLoRA          int     `json:"q_lora_rank"`
	SlidingWindow  int     `json:"sliding_window"`
	MoEInter       int     `json:"moe_intermediate_size"`
	SharedExperts  int     `json:"n_shared_experts"`
	RoutedScale    float64 `json:"routed_scaling_factor"`
	NormTopK       bool    `json:"norm_topk_prob"`
	SwiGLULimit    float64 `json:"swiglu_limit"`
	IndexHeads     int     `json:"index_n_heads"`
	IndexHeadDim   int     `json:"index_head_dim"`
	IndexTopK      int     `json:"index_topk"`
	OGroups        int     `json:"o_groups"`
	OLoRA          int     `json:"o_lora_rank"`
	CompressRatios []int32 `json:"compress_ratios"`
	CompressTheta  float64 `json:"compress_rope_theta"`
	HCMult         int     `json:"hc_mult"`
	HCSinkhorn     int     `json:"hc_sinkhorn_iters"`
	HCEps          float64 `json:"hc_eps"`
	HashLayers     int     `json:"num_hash_layers"`
	Vocab          int     `json:"vocab_size"`
	RopeScaling    *struct {
		Type       string  `json:"type"`
		RopeType   string  `json:"rope_type"`
		Factor     float64 `json:"factor"`
		OrigMaxPos int     `json:"original_max_position_embeddings"`
		BetaFast   float64 `json:"beta_fast"`
		BetaSlow   float64 `json:"beta_slow"`
	} `json:"rope_scaling"`
}

// v4Names maps a DeepSeek-V4 source name (less its layers.L. prefix for a
// layer's tensors) to its GGUF name (less blk.L.), as DeepseekV4Model's
// _map_dsv4_tensor_name does.
var v4Names = map[string]string{
	"embed.weight":                         "token_embd.weight",
	"norm.weight":                          "output_norm.weight",
	"head.weight":                          "output.weight",
	"hc_head_fn":                           "output_hc_fn.weight",
	"hc_head_base":                         "output_hc_base.weight",
	"hc_head_scale":                        "output_hc_scale.weight",
	"hc_attn_fn":                           "hc_attn_fn.weight",
	"hc_attn_base":                         "hc_attn_base.weight",
	"hc_attn_scale":                        "hc_attn_scale.weight",
	"hc_ffn_fn":                            "hc_ffn_fn.weight",
	"hc_ffn_base":                          "hc_ffn_base.weight",
	"hc_ffn_scale":                         "hc_ffn_scale.weight",
	"attn.attn_sink":                       "attn_sinks.weight",
	"attn.wq_a.weight":                     "attn_q_a.weight",
	"attn.wq_b.weight":                     "attn_q_b.weight",
	"attn.q_norm.weight":                   "attn_q_a_norm.weight",
	"attn.wkv.weight":                      "attn_kv.weight",
	"attn.kv_norm.weight":                  "attn_kv_a_norm.weight",
	"attn.wo_a.weight":                     "attn_output_a.weight",
	"attn.wo_b.weight":                     "attn_output_b.weight",
	"attn.compressor.ape":                  "attn_compressor_ape.weight",
	"attn.compressor.wkv.weight":           "attn_compressor_kv.weight",
	"attn.compressor.wgate.weight":         "attn_compressor_gate.weight",
	"attn.compressor.norm.weight":          "attn_compressor_norm.weight",
	"attn.indexer.wq_b.weight":             "indexer.attn_q_b.weight",
	"attn.indexer.weights_proj.weight":     "indexer.proj.weight",
	"attn.indexer.compressor.ape":          "indexer_compressor_ape.weight",
	"attn.indexer.compressor.wkv.weight":   "indexer_compressor_kv.weight",
	"attn.indexer.compressor.wgate.weight": "indexer_compressor_gate.weight",
	"attn.indexer.compressor.norm.weight":  "indexer_compressor_norm.weight",
	"attn_norm.weight":                     "attn_norm.weight",
	"ffn_norm.weight":                      "ffn_norm.weight",
	"ffn.gate.weight":                      "ffn_gate_inp.weight",
	"ffn.gate.bias":                        "exp_probs_b.bias",
	"ffn.gate.bias_vl":                     "exp_probs_b_vl.bias",
	"ffn.gate.tid2eid":                     "ffn_gate_tid2eid.weight",
	"ffn.shared_experts.w1.weight":         "ffn_gate_shexp.weight",
	"ffn.shared_experts.w2.weight":         "ffn_down_shexp.weight",
	"ffn.shared_experts.w3.weight":         "ffn_up_shexp.weight",
}

// v4Required are the config.json keys DeepseekV4Model.set_gguf_parameters
// indexes without a default, and the two llama.cpp cannot load without
// (max_position_embeddings for context_length; num_key_value_heads, whose
// absence makes llama.cpp take the query head count).
var v4Required = []string{"qk_rope_head_dim", "q_lora_rank", "sliding_window", "moe_intermediate_size",
	"n_shared_experts", "routed_scaling_factor", "norm_topk_prob", "swiglu_limit", "index_n_heads",
	"index_head_dim", "index_topk", "o_groups", "o_lora_rank", "compress_ratios", "compress_rope_theta",
	"hc_mult", "hc_sinkhorn_iters", "hc_eps", "num_hash_layers", "max_position_embeddings", "num_key_value_heads"}

var v4Layer = regexp.MustCompile(`^layers\.(\d+)\.(.+)$`)
var v4Expert = regexp.MustCompile(`^ffn\.experts\.\d+\.w[123]\.(weight|scale)$`)

// planDeepseek4 is the deepseek4 recipe (DeepSeek-V4, V4-Flash) as
// llama.cpp's converter writes it (MOSTLY_MXFP4_MOE): routed experts
// stacked per layer and repacked to ggml MXFP4, byte for byte; FP8
// matrices dequantised and stored Q8_0; BF16 matrices BF16; F32 tensors,
// vectors and norms F32; tid2eid I32; the MTP block and the hash layers'
// unused gate.bias left out. With experts IQ2_XXS the routed experts q2/
// quantises are q2/'s blocks instead (gate and up IQ2_XXS, down Q2_K),
// the rest as MXFP4.
func planDeepseek4(experts Type, tok *tokenizers) func(cat *checkpoint.Catalog) (*Model, error) {
	return func(cat *checkpoint.Catalog) (*Model, error) { return planV4(cat, experts, tok) }
}

func planV4(cat *checkpoint.Catalog, experts Type, tok *tokenizers) (*Model, error) {
	if cat.ConfigBytes == nil {
		return nil, fmt.Errorf("config.json: missing")
	}
	if f := cat.Config.Family; f != checkpoint.DeepSeekV4 {
		return nil, fmt.Errorf("config.json: model_type %q is not deepseek_v4 (llama.cpp's deepseek4 architecture is DeepSeek-V4's)", cat.Config.ModelType)
	}
	var c v4Config
	if err := json.Unmarshal(cat.ConfigBytes, &c); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	var missing []string
	for _, k := range v4Required {
		if _, ok := cat.Config.Raw[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("config.json: missing %s (llama.cpp's converter reads them; a default would change the model)", strings.Join(missing, ", "))
	}
	if c.Layers <= 0 || c.Experts <= 0 || len(c.CompressRatios) < c.Layers {
		return nil, fmt.Errorf("config.json: %d layers, %d experts and %d compress_ratios do not describe a DeepSeek-V4 model", c.Layers, c.Experts, len(c.CompressRatios))
	}
	if cat.Tensor("embed.weight") == nil {
		return nil, fmt.Errorf("no embedding table embed.weight (the DeepSeek-V4 release naming)")
	}
	p := &ds4{cat: cat, cfg: &c, expertType: experts, tok: tok}
	if err := p.tensors(); err != nil {
		return nil, err
	}
	if experts == IQ2_XXS && p.quantised == 0 {
		return nil, fmt.Errorf("no routed expert q2/ quantises (MXFP4 rows of whole 256-weight blocks); MXFP4/ is this checkpoint's recipe")
	}
	kvs, err := p.kvs()
	if err != nil {
		return nil, err
	}
	return &Model{Name: modelName(cat.Dir) + "-" + experts.Name, KVs: kvs, Tensors: p.out}, nil
}

// ds4 is the state of planning one deepseek4 model.
type ds4 struct {
	cat        *checkpoint.Catalog
	cfg        *v4Config
	expertType Type // MXFP4, or IQ2_XXS for q2/'s blocks
	quantised  int  // stacked expert tensors made of q2/'s blocks
	tok        *tokenizers
	out        []Tensor
}

// tensors maps every source tensor, the model-wide ones first, then layer
// by layer with the layer's stacked experts last. A tensor the converter
// would refuse is an error naming it.
func (p *ds4) tensors() error {
	c := p.cfg
	layers := make([][]*checkpoint.Tensor, c.Layers)
	for _, t := range p.cat.Tensors {
		switch {
		case strings.HasPrefix(t.Name, "mtp."):
			continue // the converter's default export leaves MTP out
		case t.Format == checkpoint.FormatFP8Scale:
			continue // folded into its weight
		}
		m := v4Layer.FindStringSubmatch(t.Name)
		if m == nil {
			g, ok := v4Names[t.Name]
			if !ok {
				return fmt.Errorf("tensor %s: not a DeepSeek-V4 tensor the converter knows", t.Name)
			}
			if err := p.add(g, t); err != nil {
				return err
			}
			continue
		}
		l, err := strconv.Atoi(m[1])
		if err != nil || l >= c.Layers {
			return fmt.Errorf("tensor %s: layer %s outside the config's %d", t.Name, m[1], c.Layers)
		}
		layers[l] = append(layers[l], t)
	}
	for l, ts := range layers {
		blk := fmt.Sprintf("blk.%d.", l)
		for _, t := range ts {
			rest := t.Name[len(fmt.Sprintf("layers.%d.", l)):]
			switch {
			case v4Expert.MatchString(rest):
				continue
			case rest == "ffn.gate.bias" && l < c.HashLayers:
				continue // hash layers route by tid2eid; the converter drops it
			}
			g, ok := v4Names[rest]
			if !ok {
				return fmt.Errorf("tensor %s: not a DeepSeek-V4 tensor the converter knows", t.Name)
			}
			if err := p.add(blk+g, t); err != nil {
				return err
			}
		}
		for _, pr := range [][2]string{{"ffn_gate_exps", "w1"}, {"ffn_down_exps", "w2"}, {"ffn_up_exps", "w3"}} {
			if err := p.experts(l, pr[0], pr[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// typeFor is the converter's type for a source tensor: tensor_force_quant
// (FP8 matrices Q8_0, F32 stays F32, BF16 matrices BF16), then vectors and
// norms F32; tid2eid I32.
func typeFor(name string, t *checkpoint.Tensor) (Type, error) {
	switch {
	case strings.HasSuffix(name, "ffn_gate_tid2eid.weight"):
		if t.DType != safetensors.I32 && t.DType != safetensors.I64 {
			return Type{}, fmt.Errorf("tensor %s: tid2eid is %s, not an integer", t.Name, t.DType)
		}
		return I32, nil
	case len(t.Shape) <= 1 || strings.HasSuffix(name, "_norm.weight"):
		return F32, nil
	case t.Format == checkpoint.FormatFP8:
		return Q8_0, nil
	case t.DType == safetensors.F32:
		return F32, nil
	case t.DType == safetensors.BF16:
		return BF16, nil
	}
	return Type{}, fmt.Errorf("tensor %s: %s %v has no DeepSeek-V4 conversion", t.Name, t.DType, t.Shape)
}

// add appends the GGUF tensor of one source tensor, of the source's shape
// reversed.
func (p *ds4) add(name string, s *checkpoint.Tensor) error {
	typ, err := typeFor(name, s)
	if err != nil {
		return err
	}
	ne := reversed(s.Shape)
	if len(ne) == 0 {
		ne = []int64{1}
	}
	if ne[0]%typ.BlockWeights != 0 {
		return fmt.Errorf("tensor %s: rows of %d do not fill %s blocks of %d", s.Name, ne[0], typ.Name, typ.BlockWeights)
	}
	if s.Format == checkpoint.FormatFP8 && s.Block != [2]int64{128, 128} {
		// The converter hard-codes 128x128 scale blocks for V4.
		return fmt.Errorf("tensor %s: FP8 scale blocks %v, the converter assumes 128x128", s.Name, s.Block)
	}
	t := Tensor{TensorInfo: TensorInfo{Name: name, Ne: ne, Type: typ}}
	rows := t.Rows()
	switch {
	case s.Format != checkpoint.FormatFP8 && sameBytes(s, typ):
		t.Parts = []Part{{Rows: rows, Src: s}}
	case typ == I32:
		t.Parts = []Part{{Rows: rows, Src: s, Bytes: func(lo, hi int64, dst []byte) error { return int64ToInt32(s, lo, hi, dst) }}}
	default:
		t.Parts = []Part{{Rows: rows, Src: s, Bytes: func(lo, hi int64, dst []byte) error { return encodeRows(s, lo, hi, typ, dst) }}}
	}
	p.out = append(p.out, t)
	return nil
}

// int64ToInt32 narrows rows [lo, hi) of an I64 tensor to I32, as the
// converter's .to(torch.int32) does, refusing values that do not fit.
func int64ToInt32(s *checkpoint.Tensor, lo, hi int64, dst []byte) error {
	c := cols(s)
	b := make([]byte, (hi-lo)*c*8)
	if err := readSource(s, b, lo*c*8); err != nil {
		return err
	}
	for i := range (hi - lo) * c {
		v := int64(binary.LittleEndian.Uint64(b[8*i:]))
		if v != int64(int32(v)) {
			return fmt.Errorf("%s: tensor %s: value %d does not fit I32", s.Shard.Name, s.Name, v)
		}
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(int32(v)))
	}
	return nil
}

// experts stacks layer l's routed experts of one projection, in expert
// order, each repacked to MXFP4, or for the IQ2_XXS recipe, when q2/
// quantises them, each q2/'s quantised tensor of it. Either way expert e's
// rows are rows [e·rows, (e+1)·rows) of the stack, one part.
func (p *ds4) experts(l int, gguf, proj string) error {
	n := p.cfg.Experts
	t := Tensor{TensorInfo: TensorInfo{Name: fmt.Sprintf("blk.%d.%s.weight", l, gguf), Type: MXFP4}}
	if w := p.cat.Tensor(fmt.Sprintf("layers.%d.ffn.experts.0.%s.weight", l, proj)); p.expertType == IQ2_XXS && w != nil && q2.Quantisable(w) {
		t.Type = Q2_K
		if q2.ExpertType(w) == q2.IQ2XXS {
			t.Type = IQ2_XXS
		}
		p.quantised++
	}
	var first *checkpoint.Tensor
	for e := range n {
		name := fmt.Sprintf("layers.%d.ffn.experts.%d.%s.weight", l, e, proj)
		w := p.cat.Tensor(name)
		if w == nil {
			return fmt.Errorf("tensor %s: missing", name)
		}
		if err := checkMXFP4(w); err != nil {
			return err
		}
		if first == nil {
			first = w
		} else if w.Shape[0] != first.Shape[0] || w.Shape[1] != first.Shape[1] {
			return fmt.Errorf("tensor %s: shape %v does not stack with expert 0's %v", w.Name, w.Shape, first.Shape)
		}
		switch {
		case t.Type == MXFP4:
			t.Parts = append(t.Parts, Part{Rows: w.Shape[0], Src: w, Bytes: func(lo, hi int64, dst []byte) error { return repackMXFP4(w, lo, hi, dst) }})
		case !q2.Quantisable(w):
			return fmt.Errorf("tensor %s: q2/ does not quantise it, but quantises expert 0", w.Name)
		default:
			t.Parts = append(t.Parts, Part{Rows: w.Shape[0], Src: w, Q2: true, Bytes: func(lo, hi int64, dst []byte) error {
				return q2.QuantiseRows(context.Background(), w, lo, hi, dst)
			}})
		}
	}
	t.Ne = []int64{first.Shape[1] * 2, first.Shape[0], int64(n)}
	p.out = append(p.out, t)
	return nil
}

// checkMXFP4 checks that a weight is DeepSeek's MXFP4: bytes [rows,
// cols/2] of two E2M1 codes and an E8M0 scale [rows, cols/32].
func checkMXFP4(w *checkpoint.Tensor) error {
	s := w.Scale
	if w.Format != checkpoint.FormatMXFP4 || s == nil || len(w.Shape) != 2 {
		return fmt.Errorf("tensor %s: %s %v is not an MXFP4 weight with its scale", w.Name, w.DType, w.Shape)
	}
	if w.Shape[1]%16 != 0 || s.DType != safetensors.F8E8M0 || len(s.Shape) != 2 || s.Shape[0] != w.Shape[0] || s.Shape[1] != w.Shape[1]/16 {
		return fmt.Errorf("tensor %s: scale %s %s %v does not fit weight %v in 32-value blocks", w.Name, s.Name, s.DType, s.Shape, w.Shape)
	}
	return nil
}

// repackMXFP4 writes rows [lo, hi) of an MXFP4 weight as ggml block_mxfp4
// (base.py repack_mxfp4_blocks): per 32 values, the E8M0 scale byte, then
// 16 bytes whose byte j holds value j in the low nibble and value j+16 in
// the high one. The source packs value 2i low and 2i+1 high. The 4-bit
// codes are the same on both sides, so this moves bits and nothing else.
func repackMXFP4(w *checkpoint.Tensor, lo, hi int64, dst []byte) error {
	half := w.Shape[1]
	nb := half / 16
	n := (hi - lo) * nb
	scales := make([]byte, n)
	if err := readSource(w.Scale, scales, lo*nb); err != nil {
		return err
	}
	// The codes are 16 of each block's 17 bytes: read into dst's tail,
	// each block's are read before any output lands on them.
	if err := readSource(w, dst[n:17*n], lo*half); err != nil {
		return err
	}
	repackMXFP4Blocks(dst[:17*n], scales)
	return nil
}

// repackMXFP4Blocks repacks in place: dst holds the source codes of
// len(scales) blocks in its last 16·len(scales) bytes and receives the
// blocks. Block b's 17 bytes end at or before block b+1's codes begin, so
// a block is written only over codes already repacked.
func repackMXFP4Blocks(dst, scales []byte) {
	const lo4 = 0x0f0f0f0f0f0f0f0f
	n := len(scales)
	for b, s := range scales {
		src := dst[n+16*b : n+16*b+16]
		// Byte k of a holds values 2k, 2k+1, byte k of c values 16+2k,
		// 17+2k; output byte 2k is values 2k and 16+2k, byte 2k+1
		// values 2k+1 and 17+2k.
		a := binary.LittleEndian.Uint64(src)
		c := binary.LittleEndian.Uint64(src[8:])
		even := a&lo4 | c&lo4<<4
		odd := a>>4&lo4 | c&^lo4
		out := dst[17*b : 17*b+17]
		out[0] = s
		binary.LittleEndian.PutUint64(out[1:], spreadBytes(uint32(even))|spreadBytes(uint32(odd))<<8)
		binary.LittleEndian.PutUint64(out[9:], spreadBytes(uint32(even>>32))|spreadBytes(uint32(odd>>32))<<8)
	}
}

// spreadBytes moves byte i of x to byte 2i.
func spreadBytes(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

// kvs is the deepseek4 metadata the converter writes (TextModel's keys,
// then DeepseekV4Model's), with general.alignment set to a page.
func (p *ds4) kvs() ([]KV, error) {
	c := p.cfg
	const a = "deepseek4."
	if c.MaxPos <= 0 || c.KVHeads <= 0 {
		return nil, fmt.Errorf("config.json: max_position_embeddings %d and num_key_value_heads %d must be positive", c.MaxPos, c.KVHeads)
	}
	if c.ScoringFunc != "sqrtsoftplus" {
		return nil, fmt.Errorf("config.json: scoring_func %q; llama.cpp's deepseek4 loads only sqrtsoftplus", c.ScoringFunc)
	}
	if c.HCSinkhorn <= 0 || c.HCSinkhorn > v4.MaxSinkhornIters {
		return nil, fmt.Errorf("config.json: hc_sinkhorn_iters %d is outside 1-%d (DeepSeek's releases run 20), and llama.cpp would run every one of them", c.HCSinkhorn, v4.MaxSinkhornIters)
	}
	ftype := uint32(FileTypeMostlyMXFP4)
	if p.expertType == IQ2_XXS {
		ftype = FileTypeMostlyIQ2_XXS
	}
	kvs := append(generalKVs("deepseek4", p.cat.Dir, ftype), []KV{
		{a + "block_count", uint32(c.Layers)},
		{a + "context_length", uint32(c.MaxPos)},
		{a + "embedding_length", uint32(c.Hidden)},
		{a + "attention.head_count", uint32(c.Heads)},
		{a + "attention.head_count_kv", uint32(c.KVHeads)},
	}...)
	if y := c.RopeScaling; y != nil && (y.Type == "yarn" || y.RopeType == "yarn") && y.Factor != 0 {
		kvs = append(kvs,
			KV{a + "rope.scaling.type", "yarn"},
			KV{a + "rope.scaling.factor", float32(y.Factor)},
			KV{a + "rope.scaling.original_context_length", uint32(y.OrigMaxPos)},
			KV{a + "rope.scaling.yarn_beta_fast", float32(y.BetaFast)},
			KV{a + "rope.scaling.yarn_beta_slow", float32(y.BetaSlow)},
		)
	}
	swiglu := make([]float32, c.Layers)
	for i := range swiglu {
		swiglu[i] = float32(c.SwiGLULimit)
	}
	kvs = append(kvs,
		KV{a + "rope.freq_base", float32(c.RopeTheta)},
		KV{a + "attention.layer_norm_rms_epsilon", float32(c.RMSNormEps)},
		KV{a + "expert_count", uint32(c.Experts)},
		KV{a + "expert_used_count", uint32(c.TopK)},
		KV{a + "expert_gating_func", uint32(4)}, // sqrtsoftplus
		KV{a + "attention.key_length", uint32(c.HeadDim)},
		KV{a + "attention.value_length", uint32(c.HeadDim)},
		KV{a + "rope.dimension_count", uint32(c.RopeDim)},
		KV{a + "attention.q_lora_rank", uint32(c.QLoRA)},
		KV{a + "attention.sliding_window", uint32(c.SlidingWindow)},
		KV{a + "expert_feed_forward_length", uint32(c.MoEInter)},
		KV{a + "expert_shared_count", uint32(c.SharedExperts)},
		KV{a + "expert_weights_scale", float32(c.RoutedScale)},
		KV{a + "expert_weights_norm", c.NormTopK},
		KV{a + "swiglu_clamp_exp", swiglu},
		KV{a + "swiglu_clamp_shexp", swiglu},
		KV{a + "attention.indexer.head_count", uint32(c.IndexHeads)},
		KV{a + "attention.indexer.key_length", uint32(c.IndexHeadDim)},
		KV{a + "attention.indexer.top_k", uint32(c.IndexTopK)},
		KV{a + "attention.output_group_count", uint32(c.OGroups)},
		KV{a + "attention.output_lora_rank", uint32(c.OLoRA)},
		// Python ints: the converter writes an INT32 array.
		KV{a + "attention.compress_ratios", c.CompressRatios},
		KV{a + "attention.compress_rope_freq_base", float32(c.CompressTheta)},
		KV{a + "hyper_connection.count", uint32(c.HCMult)},
		KV{a + "hyper_connection.sinkhorn_iterations", uint32(c.HCSinkhorn)},
		KV{a + "hyper_connection.epsilon", float32(c.HCEps)},
		KV{a + "hash_layer_count", uint32(c.HashLayers)},
		KV{a + "embedding_length_out", uint32(c.Hidden * c.HCMult)},
	)
	tok, err := p.tokenizer()
	if err != nil {
		return nil, err
	}
	return append(kvs, tok...), nil
}

// tokenizer reads the tokenizer metadata: V4 ships DeepSeek-V3's
// tokenizer, whose pre-tokenizer llama.cpp names deepseek-v3.
func (p *ds4) tokenizer() ([]KV, error) {
	return p.tok.get(p.cat, "deepseek-v3", p.cfg.Vocab)
}

package deepseek2

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/trace"
)

// Scoring functions of the router.
const (
	ScoreSoftmax = "softmax" // DeepSeek-V2 / V2-Lite
	ScoreSigmoid = "sigmoid" // DeepSeek-V3 / R1
)

// Top-k methods of the router (HF topk_method). "gready" is a spelling
// found in some copies of the V2 modeling file.
const (
	TopKGreedy         = "greedy"
	TopKGroupGreedy    = "group_limited_greedy"
	TopKNoAuxTC        = "noaux_tc"
	topKGreedyMisspelt = "gready"
)

// Config is what the forward needs from config.json. It is read from the
// Hugging Face keys (hidden_size, num_hidden_layers, ...), else from the
// keys of DeepSeek's inference ModelArgs (dim, n_layers, ...), which the
// flat-named checkpoints carry.
type Config struct {
	// Family is checkpoint's reading of the config: V2 or V3 (whose
	// Hugging Face files weight routes differently) or a ModelArgs config.
	Family        checkpoint.Family
	ModelType     string // model_type as config.json writes it, for trace.json
	Architectures []string

	Hidden, Vocab, Layers int
	DenseLayers           int // first_k_dense_replace: layers before it have a dense FFN
	MoELayerFreq          int // a layer at or past DenseLayers is MoE when layer % MoELayerFreq == 0
	Inter                 int // dense FFN width
	MoEInter              int // routed expert width

	Heads  int
	QLoRA  int // 0: the query is one projection (q_proj / wq)
	KVLoRA int
	QKNope int
	QKRope int
	VHead  int

	RoutedExperts, SharedExperts, TopK int
	Groups, TopKGroups                 int
	ScoringFunc                        string
	TopKMethod                         string
	NormTopKProb                       bool
	RoutedScale                        float64

	RMSNormEps float64 // the layer norms; q_norm and kv_norm use 1e-6 (as HF does)
	RopeTheta  float64
	// YaRN is the rotary scaling, nil when there is none.
	YaRN *YaRN
}

// YaRN holds the rope_scaling settings of type "yarn".
type YaRN struct {
	Factor       float64
	OrigMaxPos   int
	BetaFast     float64
	BetaSlow     float64
	MScale       float64
	MScaleAllDim float64
}

// LatentNormEps is the epsilon of q_a_layernorm and kv_a_layernorm, which
// the Hugging Face code leaves at its default whatever rms_norm_eps says.
const LatentNormEps = 1e-6

// QKHead is the width of one head's query and key: nope + rope.
func (c *Config) QKHead() int { return c.QKNope + c.QKRope }

// IsMoE reports whether layer l has routed experts (HF's rule; DeepSeek's
// model.py agrees when moe_layer_freq is 1, as in every release).
func (c *Config) IsMoE(l int) bool {
	return c.RoutedExperts > 0 && l >= c.DenseLayers && l%c.MoELayerFreq == 0
}

// SharedInter is the width of the shared experts, which run as one MLP.
func (c *Config) SharedInter() int { return c.SharedExperts * c.MoEInter }

// SoftmaxScale is the attention scale: (qk_nope + qk_rope)^-0.5, times
// mscale² with YaRN, where mscale = 0.1 · mscale_all_dim · ln(factor) + 1
// (HF applies it whenever rope_scaling is yarn; DeepSeek's model.py calls
// the same value mscale).
func (c *Config) SoftmaxScale() float64 {
	s := 1 / math.Sqrt(float64(c.QKHead()))
	if c.YaRN != nil && c.YaRN.MScaleAllDim != 0 {
		m := yarnMScale(c.YaRN.Factor, c.YaRN.MScaleAllDim)
		s *= m * m
	}
	return s
}

// rawConfig lists every key read, both spellings; pointers tell absent
// from zero.
type rawConfig struct {
	Architectures []string `json:"architectures"`

	HiddenSize         *int     `json:"hidden_size"`
	Dim                *int     `json:"dim"`
	VocabSize          *int     `json:"vocab_size"`
	NumHiddenLayers    *int     `json:"num_hidden_layers"`
	NLayers            *int     `json:"n_layers"`
	FirstKDenseReplace *int     `json:"first_k_dense_replace"`
	NDenseLayers       *int     `json:"n_dense_layers"`
	MoELayerFreq       *int     `json:"moe_layer_freq"`
	IntermediateSize   *int     `json:"intermediate_size"`
	InterDim           *int     `json:"inter_dim"`
	MoEIntermediate    *int     `json:"moe_intermediate_size"`
	MoEInterDim        *int     `json:"moe_inter_dim"`
	NumAttentionHeads  *int     `json:"num_attention_heads"`
	NHeads             *int     `json:"n_heads"`
	QLoRARank          *int     `json:"q_lora_rank"`
	KVLoRARank         *int     `json:"kv_lora_rank"`
	QKNopeHeadDim      *int     `json:"qk_nope_head_dim"`
	QKRopeHeadDim      *int     `json:"qk_rope_head_dim"`
	VHeadDim           *int     `json:"v_head_dim"`
	NRoutedExperts     *int     `json:"n_routed_experts"`
	NSharedExperts     *int     `json:"n_shared_experts"`
	NumExpertsPerTok   *int     `json:"num_experts_per_tok"`
	NActivatedExperts  *int     `json:"n_activated_experts"`
	NGroup             *int     `json:"n_group"`
	NExpertGroups      *int     `json:"n_expert_groups"`
	TopKGroup          *int     `json:"topk_group"`
	NLimitedGroups     *int     `json:"n_limited_groups"`
	ScoringFunc        *string  `json:"scoring_func"`
	ScoreFunc          *string  `json:"score_func"`
	TopKMethod         *string  `json:"topk_method"`
	NormTopKProb       *bool    `json:"norm_topk_prob"`
	RoutedScaling      *float64 `json:"routed_scaling_factor"`
	RouteScale         *float64 `json:"route_scale"`
	RMSNormEps         *float64 `json:"rms_norm_eps"`
	RopeTheta          *float64 `json:"rope_theta"`

	RopeScaling *struct {
		Type         *string  `json:"type"`
		RopeType     *string  `json:"rope_type"`
		Factor       *float64 `json:"factor"`
		OrigMaxPos   *int     `json:"original_max_position_embeddings"`
		BetaFast     *float64 `json:"beta_fast"`
		BetaSlow     *float64 `json:"beta_slow"`
		MScale       *float64 `json:"mscale"`
		MScaleAllDim *float64 `json:"mscale_all_dim"`
	} `json:"rope_scaling"`
	// ModelArgs' rope keys.
	OriginalSeqLen *int     `json:"original_seq_len"`
	RopeFactor     *float64 `json:"rope_factor"`
	BetaFast       *float64 `json:"beta_fast"`
	BetaSlow       *float64 `json:"beta_slow"`
	MScale         *float64 `json:"mscale"`
	MaxSeqLen      *int     `json:"max_seq_len"`

	// Features of later DeepSeek models this engine does not run; their
	// presence makes the configuration unsupported.
	HCMult         *int            `json:"hc_mult"`
	EngramLayerIDs json.RawMessage `json:"engram_layer_ids"`
	CompressRatios json.RawMessage `json:"compress_ratios"`
	OGroups        *int            `json:"o_groups"`
	IndexNHeads    *int            `json:"index_n_heads"`
	TextConfig     json.RawMessage `json:"text_config"`
	ExpertDType    *string         `json:"expert_dtype"`
	Quantization   *struct {
		ExpertDType *string `json:"expert_dtype"`
	} `json:"quantization_config"`
}

// ParseConfig reads config.json. It returns a *trace.Unsupported for a
// model whose architecture the engine cannot run, and a plain error for a
// config.json that is malformed or lacks a setting.
func ParseConfig(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	cc, _ := checkpoint.ParseConfig(data) // its errors are the catalog's to report
	if err := r.unsupported(cc); err != nil {
		return nil, err
	}
	c := &Config{Architectures: r.Architectures, Family: cc.Family, ModelType: cc.ModelType}
	var missing []string
	need := func(dst *int, keys string, vals ...*int) {
		for _, v := range vals {
			if v != nil {
				*dst = *v
				return
			}
		}
		missing = append(missing, keys)
	}
	opt := func(def int, vals ...*int) int {
		for _, v := range vals {
			if v != nil {
				return *v
			}
		}
		return def
	}
	optF := func(def float64, vals ...*float64) float64 {
		for _, v := range vals {
			if v != nil {
				return *v
			}
		}
		return def
	}
	optS := func(def string, vals ...*string) string {
		for _, v := range vals {
			if v != nil {
				return *v
			}
		}
		return def
	}
	need(&c.Hidden, "hidden_size", r.HiddenSize, r.Dim)
	need(&c.Vocab, "vocab_size", r.VocabSize)
	need(&c.Layers, "num_hidden_layers", r.NumHiddenLayers, r.NLayers)
	need(&c.Heads, "num_attention_heads", r.NumAttentionHeads, r.NHeads)
	need(&c.KVLoRA, "kv_lora_rank", r.KVLoRARank)
	need(&c.QKNope, "qk_nope_head_dim", r.QKNopeHeadDim)
	need(&c.QKRope, "qk_rope_head_dim", r.QKRopeHeadDim)
	need(&c.VHead, "v_head_dim", r.VHeadDim)
	c.QLoRA = opt(0, r.QLoRARank) // null (HF) and 0 (model.py) both mean none
	c.DenseLayers = opt(0, r.FirstKDenseReplace, r.NDenseLayers)
	c.MoELayerFreq = opt(1, r.MoELayerFreq)
	c.Inter = opt(0, r.IntermediateSize, r.InterDim)
	c.RoutedExperts = opt(0, r.NRoutedExperts)
	if c.RoutedExperts > 0 {
		need(&c.MoEInter, "moe_intermediate_size", r.MoEIntermediate, r.MoEInterDim)
		need(&c.TopK, "num_experts_per_tok", r.NumExpertsPerTok, r.NActivatedExperts)
	}
	c.SharedExperts = opt(0, r.NSharedExperts)
	c.Groups = opt(1, r.NGroup, r.NExpertGroups)
	c.TopKGroups = opt(1, r.TopKGroup, r.NLimitedGroups)
	c.ScoringFunc = optS(ScoreSoftmax, r.ScoringFunc, r.ScoreFunc)
	c.TopKMethod = optS("", r.TopKMethod)
	c.NormTopKProb = r.NormTopKProb != nil && *r.NormTopKProb
	c.RoutedScale = optF(1, r.RoutedScaling, r.RouteScale)
	c.RMSNormEps = optF(1e-6, r.RMSNormEps)
	c.RopeTheta = optF(10000, r.RopeTheta)
	if len(missing) > 0 {
		return nil, fmt.Errorf("config.json: missing %s", strings.Join(missing, ", "))
	}
	if c.TopKMethod == "" {
		c.TopKMethod = defaultTopKMethod(c)
	}
	if c.TopKMethod == topKGreedyMisspelt {
		c.TopKMethod = TopKGreedy
	}
	if err := r.rope(c); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// defaultTopKMethod infers the method of a ModelArgs config, which has
// none: model.py adds the correction bias with sigmoid scoring (V3) and
// limits groups whenever there are several.
func defaultTopKMethod(c *Config) string {
	switch {
	case c.ScoringFunc == ScoreSigmoid:
		return TopKNoAuxTC
	case c.Groups > 1:
		return TopKGroupGreedy
	}
	return TopKGreedy
}

// rope reads rope_scaling (HF) or ModelArgs' rope keys.
func (r *rawConfig) rope(c *Config) error {
	if s := r.RopeScaling; s != nil {
		kind := ""
		if s.Type != nil {
			kind = *s.Type
		} else if s.RopeType != nil {
			kind = *s.RopeType
		}
		if kind != "yarn" {
			return &trace.Unsupported{What: "this model", Missing: []string{fmt.Sprintf("rope_scaling type %q (only yarn is implemented)", kind)}}
		}
		if s.Factor == nil || s.OrigMaxPos == nil {
			return errors.New("config.json: rope_scaling: yarn needs factor and original_max_position_embeddings")
		}
		y := &YaRN{Factor: *s.Factor, OrigMaxPos: *s.OrigMaxPos, BetaFast: 32, BetaSlow: 1, MScale: 1}
		if s.BetaFast != nil {
			y.BetaFast = *s.BetaFast
		}
		if s.BetaSlow != nil {
			y.BetaSlow = *s.BetaSlow
		}
		if s.MScale != nil {
			y.MScale = *s.MScale
		}
		if s.MScaleAllDim != nil {
			y.MScaleAllDim = *s.MScaleAllDim
		}
		c.YaRN = y
		return nil
	}
	// model.py turns YaRN on when max_seq_len (default 4096·4) exceeds
	// original_seq_len; its single mscale is HF's mscale_all_dim, and it
	// has no cos/sin factor, which HF's ratio of two equal mscales matches.
	if r.RopeFactor == nil || r.OriginalSeqLen == nil {
		return nil
	}
	maxSeq := 16384
	if r.MaxSeqLen != nil {
		maxSeq = *r.MaxSeqLen
	}
	if maxSeq <= *r.OriginalSeqLen {
		return nil
	}
	m := 1.0
	if r.MScale != nil {
		m = *r.MScale
	}
	y := &YaRN{Factor: *r.RopeFactor, OrigMaxPos: *r.OriginalSeqLen, BetaFast: 32, BetaSlow: 1, MScale: m, MScaleAllDim: m}
	if r.BetaFast != nil {
		y.BetaFast = *r.BetaFast
	}
	if r.BetaSlow != nil {
		y.BetaSlow = *r.BetaSlow
	}
	c.YaRN = y
	return nil
}

// unsupported names the features of a configuration that the engine
// does not implement: DeepSeek-V3.2's sparse-attention indexer and V4's
// hyper-connections, Engram memory, compressed attention, grouped output
// projection, MXFP4 experts and sqrtsoftplus routing.
func (r *rawConfig) unsupported(cc *checkpoint.Config) error {
	var missing []string
	add := func(s string) { missing = append(missing, s) }
	mt := cc.ModelType
	// DeepSeek-V4.1 nests the language model's settings under text_config.
	var tc rawConfig
	if len(r.TextConfig) > 0 && json.Unmarshal(r.TextConfig, &tc) == nil {
		r.HCMult = cmp.Or(r.HCMult, tc.HCMult)
		r.OGroups = cmp.Or(r.OGroups, tc.OGroups)
		r.IndexNHeads = cmp.Or(r.IndexNHeads, tc.IndexNHeads)
		r.ScoringFunc = cmp.Or(r.ScoringFunc, tc.ScoringFunc)
		r.ExpertDType = cmp.Or(r.ExpertDType, tc.ExpertDType)
		if len(r.EngramLayerIDs) == 0 {
			r.EngramLayerIDs = tc.EngramLayerIDs
		}
		if len(r.CompressRatios) == 0 {
			r.CompressRatios = tc.CompressRatios
		}
	}
	if r.HCMult != nil {
		add(fmt.Sprintf("hyper-connections (hc_mult %d: the residual stream as parallel streams mixed by layers.N.hc_* tensors)", *r.HCMult))
	}
	if len(r.EngramLayerIDs) > 0 {
		add("Engram memory (engram_layer_ids: n-gram embedding lookups in layers.N.engram.*)")
	}
	if len(r.CompressRatios) > 0 {
		add("compressed sparse attention (compress_ratios: attn.compressor.* and the indexer)")
	} else if r.IndexNHeads != nil {
		add("DeepSeek sparse attention (index_n_heads: the lightning indexer of attn.indexer.*)")
	}
	if r.OGroups != nil {
		add("grouped low-rank output projection (o_groups: attn.wo_a / attn.wo_b)")
	}
	if r.ExpertDType == nil && r.Quantization != nil {
		r.ExpertDType = r.Quantization.ExpertDType
	}
	if r.ExpertDType != nil && *r.ExpertDType == "fp4" {
		add("MXFP4 routed experts (expert_dtype fp4)")
	}
	for _, s := range []*string{r.ScoringFunc, r.ScoreFunc} {
		if s != nil && *s != ScoreSoftmax && *s != ScoreSigmoid {
			add(fmt.Sprintf("router scoring %q (softmax and sigmoid are implemented)", *s))
		}
	}
	known := cc.Family == checkpoint.DeepSeekV2 || cc.Family == checkpoint.DeepSeekV3 || mt == ""
	if !known && len(missing) == 0 {
		add(fmt.Sprintf("model_type %q (deepseek_v2 and deepseek_v3 are implemented)", mt))
	}
	if len(missing) == 0 {
		return nil
	}
	what := "this model"
	if mt != "" {
		what = fmt.Sprintf("model_type %q", mt)
	}
	if len(r.Architectures) > 0 {
		what += " (" + strings.Join(r.Architectures, ", ") + ")"
	}
	sort.Strings(missing)
	return &trace.Unsupported{What: what, Missing: missing}
}

// validate checks the settings against each other.
func (c *Config) validate() error {
	pos := []struct {
		name string
		v    int
	}{{"hidden_size", c.Hidden}, {"vocab_size", c.Vocab}, {"num_hidden_layers", c.Layers},
		{"num_attention_heads", c.Heads}, {"kv_lora_rank", c.KVLoRA}, {"qk_nope_head_dim", c.QKNope},
		{"qk_rope_head_dim", c.QKRope}, {"v_head_dim", c.VHead}, {"moe_layer_freq", c.MoELayerFreq}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s must be positive, not %d", p.name, p.v)
		}
	}
	switch {
	case c.QLoRA < 0:
		return fmt.Errorf("q_lora_rank must not be negative, not %d", c.QLoRA)
	case c.QKRope%2 != 0:
		return fmt.Errorf("qk_rope_head_dim %d is odd: rotary pairs need an even width", c.QKRope)
	case c.DenseLayers > 0 && c.Inter <= 0:
		return errors.New("dense layers need intermediate_size")
	case c.RoutedExperts > 0 && (c.TopK <= 0 || c.TopK > c.RoutedExperts):
		return fmt.Errorf("num_experts_per_tok %d outside [1, %d]", c.TopK, c.RoutedExperts)
	case c.RoutedExperts > 0 && c.MoEInter <= 0:
		return fmt.Errorf("moe_intermediate_size must be positive, not %d", c.MoEInter)
	case c.Groups <= 0 || c.RoutedExperts%c.Groups != 0:
		return fmt.Errorf("n_group %d does not divide n_routed_experts %d", c.Groups, c.RoutedExperts)
	case c.TopKGroups <= 0 || c.TopKGroups > c.Groups:
		return fmt.Errorf("topk_group %d outside [1, n_group %d]", c.TopKGroups, c.Groups)
	case c.Groups > 1 && c.TopKGroups*(c.RoutedExperts/c.Groups) < c.TopK:
		return fmt.Errorf("topk_group %d groups of %d experts hold fewer than num_experts_per_tok %d",
			c.TopKGroups, c.RoutedExperts/c.Groups, c.TopK)
	case c.TopKMethod == TopKNoAuxTC && c.Groups > 1 && c.RoutedExperts/c.Groups < 2:
		return errors.New("noaux_tc scores a group by its two best experts: groups need at least two")
	case c.SharedExperts < 0:
		return fmt.Errorf("n_shared_experts must not be negative, not %d", c.SharedExperts)
	case c.YaRN != nil && (c.YaRN.Factor <= 0 || c.YaRN.OrigMaxPos <= 0):
		return errors.New("rope_scaling: factor and original_max_position_embeddings must be positive")
	case c.RopeTheta <= 1:
		return fmt.Errorf("rope_theta %g must exceed 1", c.RopeTheta)
	}
	switch c.TopKMethod {
	case TopKGreedy, TopKGroupGreedy, TopKNoAuxTC:
	default:
		return fmt.Errorf("topk_method %q is not one of greedy, group_limited_greedy, noaux_tc", c.TopKMethod)
	}
	switch c.ScoringFunc {
	case ScoreSoftmax, ScoreSigmoid:
	default:
		return fmt.Errorf("scoring_func %q is not softmax or sigmoid", c.ScoringFunc)
	}
	return nil
}

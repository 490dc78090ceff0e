package v4

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Router scoring functions (model.py's Gate supports all three; V4
// releases use sqrtsoftplus).
const (
	ScoreSqrtSoftplus = "sqrtsoftplus"
	ScoreSoftmax      = "softmax"
	ScoreSigmoid      = "sigmoid"
)

// Kind is the attention kind of a layer, decided by its compress ratio.
type Kind string

// The attention kinds of V4.
const (
	// SWA attends over the sliding window only (ratio 0).
	SWA Kind = "swa"
	// CSA adds compressed entries of 4 tokens picked by the indexer
	// (ratio 4, with overlapping groups).
	CSA Kind = "csa"
	// HCA adds every visible compressed entry of ratio tokens (any other
	// ratio; 128 in the releases).
	HCA Kind = "hca"
)

// Config is what the V4 forward needs: the keys of DeepSeek's
// inference/config.json (ModelArgs) where that file is given, else the
// Hugging Face spellings of config.json.
type Config struct {
	ModelType string `json:"model_type"`

	Hidden    int `json:"hidden"`
	Vocab     int `json:"vocab"`
	Layers    int `json:"layers"`
	MTPLayers int `json:"mtp_layers"`
	Heads     int `json:"heads"`
	HeadDim   int `json:"head_dim"`
	RopeDim   int `json:"rope_head_dim"`
	QLoRA     int `json:"q_lora_rank"`
	OGroups   int `json:"o_groups"`
	OLoRA     int `json:"o_lora_rank"`
	Window    int `json:"sliding_window"`
	// CompressRatios has Layers + MTPLayers entries, as every release
	// writes it.
	CompressRatios []int `json:"compress_ratios"`

	RopeTheta         float64 `json:"rope_theta"`
	CompressRopeTheta float64 `json:"compress_rope_theta"`
	// YaRN applies to compressed layers only, when OrigSeqLen > 0; there
	// is no mscale anywhere in V4.
	RopeFactor float64 `json:"rope_factor"`
	OrigSeqLen int     `json:"original_seq_len"`
	BetaFast   float64 `json:"beta_fast"`
	BetaSlow   float64 `json:"beta_slow"`
	IndexHeads int     `json:"index_heads"`
	IndexDim   int     `json:"index_head_dim"`
	IndexTopK  int     `json:"index_topk"`

	HCMult          int     `json:"hc_mult"`
	HCSinkhornIters int     `json:"hc_sinkhorn_iters"`
	HCEps           float64 `json:"hc_eps"`
	NormEps         float64 `json:"norm_eps"`

	RoutedExperts int     `json:"routed_experts"`
	SharedExperts int     `json:"shared_experts"`
	TopK          int     `json:"experts_per_token"`
	MoEInter      int     `json:"moe_intermediate"`
	ScoreFunc     string  `json:"scoring_func"`
	RouteScale    float64 `json:"routed_scaling_factor"`
	SwiGLULimit   float64 `json:"swiglu_limit"`
	HashLayers    int     `json:"hash_layers"`
}

// Kind is the attention kind of layer l.
func (c *Config) Kind(l int) Kind {
	switch c.CompressRatios[l] {
	case 0:
		return SWA
	case 4:
		return CSA
	}
	return HCA
}

// Ratio is layer l's compress ratio (0 for sliding window only).
func (c *Config) Ratio(l int) int { return c.CompressRatios[l] }

// HashRouted reports whether layer l routes by token id through tid2eid.
func (c *Config) HashRouted(l int) bool { return l < c.HashLayers }

// Role describes layer l in a few words, for ERROR.txt and records.
func (c *Config) Role(l int) string {
	var s string
	switch c.Kind(l) {
	case SWA:
		s = "sliding window only"
	case CSA:
		s = "compressed sparse attention (ratio 4, indexer)"
	default:
		s = fmt.Sprintf("heavily compressed attention (ratio %d)", c.Ratio(l))
	}
	if c.HashRouted(l) {
		return s + ", hash-routed"
	}
	return s + ", " + c.ScoreFunc + " routing"
}

// hfConfig is config.json with the Hugging Face spellings of the V4 keys.
type hfConfig struct {
	ModelType         *string  `json:"model_type"`
	HiddenSize        *int     `json:"hidden_size"`
	VocabSize         *int     `json:"vocab_size"`
	NumHiddenLayers   *int     `json:"num_hidden_layers"`
	NumNextN          *int     `json:"num_nextn_predict_layers"`
	NumHeads          *int     `json:"num_attention_heads"`
	HeadDim           *int     `json:"head_dim"`
	RopeDim           *int     `json:"qk_rope_head_dim"`
	QLoRA             *int     `json:"q_lora_rank"`
	OGroups           *int     `json:"o_groups"`
	OLoRA             *int     `json:"o_lora_rank"`
	Window            *int     `json:"sliding_window"`
	CompressRatios    []int    `json:"compress_ratios"`
	RopeTheta         *float64 `json:"rope_theta"`
	CompressRopeTheta *float64 `json:"compress_rope_theta"`
	RopeScaling       *struct {
		Type       *string  `json:"type"`
		RopeType   *string  `json:"rope_type"`
		Factor     *float64 `json:"factor"`
		OrigMaxPos *int     `json:"original_max_position_embeddings"`
		BetaFast   *float64 `json:"beta_fast"`
		BetaSlow   *float64 `json:"beta_slow"`
	} `json:"rope_scaling"`
	IndexHeads      *int     `json:"index_n_heads"`
	IndexDim        *int     `json:"index_head_dim"`
	IndexTopK       *int     `json:"index_topk"`
	HCMult          *int     `json:"hc_mult"`
	HCSinkhornIters *int     `json:"hc_sinkhorn_iters"`
	HCEps           *float64 `json:"hc_eps"`
	RMSNormEps      *float64 `json:"rms_norm_eps"`
	RoutedExperts   *int     `json:"n_routed_experts"`
	SharedExperts   *int     `json:"n_shared_experts"`
	TopK            *int     `json:"num_experts_per_tok"`
	MoEInter        *int     `json:"moe_intermediate_size"`
	ScoringFunc     *string  `json:"scoring_func"`
	RoutedScaling   *float64 `json:"routed_scaling_factor"`
	SwiGLULimit     *float64 `json:"swiglu_limit"`
	HashLayers      *int     `json:"num_hash_layers"`
}

// argsConfig is inference/config.json: ModelArgs' field names.
type argsConfig struct {
	VocabSize         *int     `json:"vocab_size"`
	Dim               *int     `json:"dim"`
	MoEInterDim       *int     `json:"moe_inter_dim"`
	NLayers           *int     `json:"n_layers"`
	NHashLayers       *int     `json:"n_hash_layers"`
	NMTPLayers        *int     `json:"n_mtp_layers"`
	NHeads            *int     `json:"n_heads"`
	NRoutedExperts    *int     `json:"n_routed_experts"`
	NSharedExperts    *int     `json:"n_shared_experts"`
	NActivated        *int     `json:"n_activated_experts"`
	ScoreFunc         *string  `json:"score_func"`
	RouteScale        *float64 `json:"route_scale"`
	SwiGLULimit       *float64 `json:"swiglu_limit"`
	QLoRA             *int     `json:"q_lora_rank"`
	HeadDim           *int     `json:"head_dim"`
	RopeDim           *int     `json:"rope_head_dim"`
	NormEps           *float64 `json:"norm_eps"`
	OGroups           *int     `json:"o_groups"`
	OLoRA             *int     `json:"o_lora_rank"`
	WindowSize        *int     `json:"window_size"`
	CompressRatios    []int    `json:"compress_ratios"`
	CompressRopeTheta *float64 `json:"compress_rope_theta"`
	OrigSeqLen        *int     `json:"original_seq_len"`
	RopeTheta         *float64 `json:"rope_theta"`
	RopeFactor        *float64 `json:"rope_factor"`
	BetaFast          *float64 `json:"beta_fast"`
	BetaSlow          *float64 `json:"beta_slow"`
	IndexHeads        *int     `json:"index_n_heads"`
	IndexDim          *int     `json:"index_head_dim"`
	IndexTopK         *int     `json:"index_topk"`
	HCMult            *int     `json:"hc_mult"`
	HCSinkhornIters   *int     `json:"hc_sinkhorn_iters"`
	HCEps             *float64 `json:"hc_eps"`
}

// runs reports whether config.json, of the V4 family, describes a model
// this package runs as V4: the V4 keys hc_mult and compress_ratios at the
// top level, model type deepseek_v4 or none, and no V4.1 feature (Engram
// layers, the text_config nesting).
func runs(configJSON []byte) bool {
	var r struct {
		ModelType      *string         `json:"model_type"`
		HCMult         *int            `json:"hc_mult"`
		CompressRatios json.RawMessage `json:"compress_ratios"`
		EngramLayerIDs json.RawMessage `json:"engram_layer_ids"`
		TextConfig     json.RawMessage `json:"text_config"`
	}
	if json.Unmarshal(configJSON, &r) != nil {
		return false
	}
	if r.ModelType != nil && *r.ModelType != "deepseek_v4" {
		return false
	}
	return r.HCMult != nil && len(r.CompressRatios) > 0 && len(r.EngramLayerIDs) == 0 && len(r.TextConfig) == 0
}

// ParseConfig reads config.json (hf) and, when not nil, DeepSeek's
// inference/config.json (args), whose values win where both set a key:
// that file is what DeepSeek's generate.py builds the model from.
// ModelArgs defaults fill in what neither sets, as model.py would.
func ParseConfig(hf, args []byte) (*Config, error) {
	c, err := parseConfig(hf, args)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// parseConfig is ParseConfig without the checks of the settings against
// each other, which differ between V4 and V4.1.
func parseConfig(hf, args []byte) (*Config, error) {
	var h hfConfig
	if err := json.Unmarshal(hf, &h); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	var a, own argsConfig
	if args != nil {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fmt.Errorf("inference/config.json: %w", err)
		}
	}
	// A config.json may itself use ModelArgs' spellings (flat-named
	// checkpoints do): they fill what inference/config.json leaves unset.
	if err := json.Unmarshal(hf, &own); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	fillUnset(&a, &own)
	c := &Config{}
	if h.ModelType != nil {
		c.ModelType = *h.ModelType
	}
	var missing []string
	// pick takes the first set value; the inference keys come first.
	pickI := func(dst *int, key string, def *int, vals ...*int) {
		for _, v := range vals {
			if v != nil {
				*dst = *v
				return
			}
		}
		if def == nil {
			missing = append(missing, key)
			return
		}
		*dst = *def
	}
	pickF := func(dst *float64, def float64, vals ...*float64) {
		*dst = def
		for _, v := range vals {
			if v != nil {
				*dst = *v
				return
			}
		}
	}
	zero, one := 0, 1
	pickI(&c.Hidden, "hidden_size", nil, a.Dim, h.HiddenSize)
	pickI(&c.Vocab, "vocab_size", nil, a.VocabSize, h.VocabSize)
	pickI(&c.Layers, "num_hidden_layers", nil, a.NLayers, h.NumHiddenLayers)
	// ModelArgs defaults to one MTP layer; config.json says how many.
	pickI(&c.MTPLayers, "num_nextn_predict_layers", &one, a.NMTPLayers, h.NumNextN)
	pickI(&c.Heads, "num_attention_heads", nil, a.NHeads, h.NumHeads)
	pickI(&c.HeadDim, "head_dim", nil, a.HeadDim, h.HeadDim)
	pickI(&c.RopeDim, "qk_rope_head_dim", nil, a.RopeDim, h.RopeDim)
	pickI(&c.QLoRA, "q_lora_rank", nil, a.QLoRA, h.QLoRA)
	pickI(&c.OGroups, "o_groups", nil, a.OGroups, h.OGroups)
	pickI(&c.OLoRA, "o_lora_rank", nil, a.OLoRA, h.OLoRA)
	pickI(&c.Window, "sliding_window", nil, a.WindowSize, h.Window)
	pickI(&c.IndexHeads, "index_n_heads", nil, a.IndexHeads, h.IndexHeads)
	pickI(&c.IndexDim, "index_head_dim", nil, a.IndexDim, h.IndexDim)
	pickI(&c.IndexTopK, "index_topk", nil, a.IndexTopK, h.IndexTopK)
	pickI(&c.HCMult, "hc_mult", nil, a.HCMult, h.HCMult)
	pickI(&c.HCSinkhornIters, "hc_sinkhorn_iters", nil, a.HCSinkhornIters, h.HCSinkhornIters)
	pickI(&c.RoutedExperts, "n_routed_experts", nil, a.NRoutedExperts, h.RoutedExperts)
	pickI(&c.SharedExperts, "n_shared_experts", &one, a.NSharedExperts, h.SharedExperts)
	pickI(&c.TopK, "num_experts_per_tok", nil, a.NActivated, h.TopK)
	pickI(&c.MoEInter, "moe_intermediate_size", nil, a.MoEInterDim, h.MoEInter)
	pickI(&c.HashLayers, "num_hash_layers", &zero, a.NHashLayers, h.HashLayers)
	pickF(&c.HCEps, 1e-6, a.HCEps, h.HCEps)
	pickF(&c.NormEps, 1e-6, a.NormEps, h.RMSNormEps)
	pickF(&c.RopeTheta, 10000, a.RopeTheta, h.RopeTheta)
	pickF(&c.RouteScale, 1, a.RouteScale, h.RoutedScaling)
	pickF(&c.SwiGLULimit, 0, a.SwiGLULimit, h.SwiGLULimit)
	var ct *float64 = a.CompressRopeTheta
	if ct == nil {
		ct = h.CompressRopeTheta
	}
	if ct == nil {
		missing = append(missing, "compress_rope_theta")
	} else {
		c.CompressRopeTheta = *ct
	}
	c.ScoreFunc = ScoreSqrtSoftplus
	for _, s := range []*string{a.ScoreFunc, h.ScoringFunc} {
		if s != nil {
			c.ScoreFunc = *s
			break
		}
	}
	c.CompressRatios = a.CompressRatios
	if c.CompressRatios == nil {
		c.CompressRatios = h.CompressRatios
	}
	if c.CompressRatios == nil {
		missing = append(missing, "compress_ratios")
	}
	if err := c.yarn(&a, &h); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("config.json: missing %s", strings.Join(missing, ", "))
	}
	return c, nil
}

// fillUnset sets every nil pointer or slice field of dst to src's.
func fillUnset(dst, src *argsConfig) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		if f := d.Field(i); f.IsNil() {
			f.Set(s.Field(i))
		}
	}
}

// yarn reads the rotary scaling: ModelArgs' original_seq_len, rope_factor
// and betas, else rope_scaling of type yarn. Without either there is no
// YaRN (original_seq_len 0, model.py's default).
func (c *Config) yarn(a *argsConfig, h *hfConfig) error {
	c.BetaFast, c.BetaSlow, c.RopeFactor = 32, 1, 1
	if a.OrigSeqLen != nil {
		c.OrigSeqLen = *a.OrigSeqLen
		if a.RopeFactor != nil {
			c.RopeFactor = *a.RopeFactor
		}
		if a.BetaFast != nil {
			c.BetaFast = *a.BetaFast
		}
		if a.BetaSlow != nil {
			c.BetaSlow = *a.BetaSlow
		}
		return nil
	}
	s := h.RopeScaling
	if s == nil {
		return nil
	}
	kind := ""
	if s.Type != nil {
		kind = *s.Type
	} else if s.RopeType != nil {
		kind = *s.RopeType
	}
	if kind != "yarn" {
		return fmt.Errorf("config.json: rope_scaling type %q: V4 uses yarn", kind)
	}
	if s.Factor == nil || s.OrigMaxPos == nil {
		return errors.New("config.json: rope_scaling: yarn needs factor and original_max_position_embeddings")
	}
	c.RopeFactor, c.OrigSeqLen = *s.Factor, *s.OrigMaxPos
	if s.BetaFast != nil {
		c.BetaFast = *s.BetaFast
	}
	if s.BetaSlow != nil {
		c.BetaSlow = *s.BetaSlow
	}
	return nil
}

// validate checks the settings against each other and against what the
// V4 forward's operations require.
func (c *Config) validate() error {
	if err := c.validateShared(); err != nil {
		return err
	}
	switch {
	case (c.HeadDim-c.RopeDim)%64 != 0:
		return fmt.Errorf("head_dim %d minus qk_rope_head_dim %d is not a multiple of 64 (the KV fake-quant block)", c.HeadDim, c.RopeDim)
	case c.IndexDim <= c.RopeDim || bits.OnesCount(uint(c.IndexDim)) != 1 || c.IndexDim%32 != 0:
		return fmt.Errorf("index_head_dim %d must be a power of two, a multiple of 32 and above qk_rope_head_dim (Hadamard, FP4 blocks)", c.IndexDim)
	}
	return nil
}

// MaxSinkhornIters bounds hc_sinkhorn_iters: five times what DeepSeek's
// V4 and V4.1 releases and reference code (ModelArgs.hc_sinkhorn_iters)
// use, so that a config cannot make one token's mixing loop run for hours.
const MaxSinkhornIters = 100

// validateShared is what V4 and V4.1 both require of their settings.
func (c *Config) validateShared() error {
	pos := []struct {
		name string
		v    int
	}{{"hidden_size", c.Hidden}, {"vocab_size", c.Vocab}, {"num_hidden_layers", c.Layers},
		{"num_attention_heads", c.Heads}, {"head_dim", c.HeadDim}, {"qk_rope_head_dim", c.RopeDim},
		{"q_lora_rank", c.QLoRA}, {"o_groups", c.OGroups}, {"o_lora_rank", c.OLoRA},
		{"sliding_window", c.Window}, {"index_n_heads", c.IndexHeads}, {"index_head_dim", c.IndexDim},
		{"index_topk", c.IndexTopK}, {"hc_mult", c.HCMult}, {"hc_sinkhorn_iters", c.HCSinkhornIters},
		{"n_routed_experts", c.RoutedExperts}, {"num_experts_per_tok", c.TopK},
		{"moe_intermediate_size", c.MoEInter}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s must be positive, not %d", p.name, p.v)
		}
	}
	switch {
	case c.MTPLayers < 0 || c.HashLayers < 0:
		return errors.New("num_nextn_predict_layers and num_hash_layers must not be negative")
	case len(c.CompressRatios) != c.Layers+c.MTPLayers:
		return fmt.Errorf("compress_ratios has %d entries, want num_hidden_layers + num_nextn_predict_layers = %d",
			len(c.CompressRatios), c.Layers+c.MTPLayers)
	case c.RopeDim%2 != 0 || c.RopeDim >= c.HeadDim:
		return fmt.Errorf("qk_rope_head_dim %d must be even and below head_dim %d", c.RopeDim, c.HeadDim)
	case c.Heads%c.OGroups != 0:
		return fmt.Errorf("o_groups %d does not divide num_attention_heads %d", c.OGroups, c.Heads)
	case c.TopK > c.RoutedExperts:
		return fmt.Errorf("num_experts_per_tok %d exceeds n_routed_experts %d", c.TopK, c.RoutedExperts)
	case c.SharedExperts != 1:
		return fmt.Errorf("n_shared_experts %d: model.py has exactly one shared expert", c.SharedExperts)
	case c.HashLayers > c.Layers:
		return fmt.Errorf("num_hash_layers %d exceeds num_hidden_layers %d", c.HashLayers, c.Layers)
	case c.RopeTheta <= 1 || c.CompressRopeTheta <= 1:
		return fmt.Errorf("rope_theta %g and compress_rope_theta %g must exceed 1", c.RopeTheta, c.CompressRopeTheta)
	case c.OrigSeqLen < 0 || c.OrigSeqLen > 0 && c.RopeFactor <= 0:
		return errors.New("yarn: original_seq_len and rope_factor must be positive")
	case c.SwiGLULimit < 0:
		return fmt.Errorf("swiglu_limit %g must not be negative", c.SwiGLULimit)
	case c.HCSinkhornIters > MaxSinkhornIters:
		return fmt.Errorf("hc_sinkhorn_iters %d: DeepSeek's releases run 20, and more than %d is refused (each is a pass over every token's mixing matrix)", c.HCSinkhornIters, MaxSinkhornIters)
	}
	for l, r := range c.CompressRatios {
		if r < 0 {
			return fmt.Errorf("compress_ratios[%d] = %d is negative", l, r)
		}
	}
	switch c.ScoreFunc {
	case ScoreSqrtSoftplus, ScoreSoftmax, ScoreSigmoid:
	default:
		return fmt.Errorf("scoring_func %q is not sqrtsoftplus, sigmoid or softmax", c.ScoreFunc)
	}
	return nil
}

// Missing names what this package lacks to run, as V4, a configuration of
// the V4 family (checkpoint.DeepSeekV4): V4.1's Engram memory and CSA2
// attention, dense FFN layers, other FP8 block sizes. It returns nil for
// a configuration of another family, or one it runs. what is the model as
// config.json names it.
func Missing(configJSON []byte) (what string, missing []string) {
	if runs(configJSON) {
		return "", nil
	}
	type keys struct {
		HCMult             *int            `json:"hc_mult"`
		CompressRatios     json.RawMessage `json:"compress_ratios"`
		EngramLayerIDs     json.RawMessage `json:"engram_layer_ids"`
		KVSources          json.RawMessage `json:"kv_source_layers"`
		KVSourceIDs        json.RawMessage `json:"kv_source_layer_ids"`
		CandidateSource    json.RawMessage `json:"candidate_source_layer"`
		CandidateSourceID  json.RawMessage `json:"candidate_source_layer_id"`
		FirstKDense        *int            `json:"first_k_dense_replace"`
		NDenseLayers       *int            `json:"n_dense_layers"`
		QuantizationConfig *struct {
			WeightBlockSize []int `json:"weight_block_size"`
		} `json:"quantization_config"`
	}
	var r struct {
		keys
		ModelType     *string  `json:"model_type"`
		Architectures []string `json:"architectures"`
		TextConfig    *keys    `json:"text_config"`
	}
	if json.Unmarshal(configJSON, &r) != nil {
		return "", nil
	}
	all := []keys{r.keys}
	if r.TextConfig != nil {
		all = append(all, *r.TextConfig)
	}
	family := r.ModelType != nil && strings.HasPrefix(*r.ModelType, "deepseek_v4")
	add := func(s string) {
		if !slices.Contains(missing, s) {
			missing = append(missing, s)
		}
	}
	for _, k := range all {
		family = family || k.HCMult != nil || len(k.CompressRatios) > 0
		if len(k.EngramLayerIDs) > 0 {
			add("Engram memory (engram_layer_ids: n-gram embedding lookups in layers.N.engram.*)")
		}
		if len(k.KVSources)+len(k.KVSourceIDs)+len(k.CandidateSource)+len(k.CandidateSourceID) > 0 {
			add("V4.1's CSA2 attention (KV and index reuse across layers, the candidate pool)")
		}
		if k.FirstKDense != nil && *k.FirstKDense > 0 || k.NDenseLayers != nil && *k.NDenseLayers > 0 {
			add("dense FFN layers (first_k_dense_replace: every V4 layer is MoE)")
		}
		if q := k.QuantizationConfig; q != nil && len(q.WeightBlockSize) == 2 && (q.WeightBlockSize[0] != 128 || q.WeightBlockSize[1] != 128) {
			add(fmt.Sprintf("FP8 weight blocks of %dx%d with activation blocks to match (V4 uses 128)", q.WeightBlockSize[0], q.WeightBlockSize[1]))
		}
	}
	if !family {
		return "", nil
	}
	if r.TextConfig != nil {
		add("V4.1's multimodal config.json (the model's keys under text_config)")
	}
	if len(missing) == 0 {
		add("a configuration of the V4 family without hc_mult and compress_ratios at the top level")
	}
	sort.Strings(missing)
	what = "this model"
	if r.ModelType != nil {
		what = fmt.Sprintf("model_type %q", *r.ModelType)
	}
	if len(r.Architectures) > 0 {
		what += " (" + strings.Join(r.Architectures, ", ") + ")"
	}
	return what, missing
}

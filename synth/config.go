package synth

// config is config.json of a V4.1 checkpoint: the official inference keys
// (dim, n_layers, ...) beside their Hugging Face names, as the released
// configs carry both kinds.
type config struct {
	Architectures         []string      `json:"architectures"`
	ModelType             string        `json:"model_type"`
	TorchDType            string        `json:"torch_dtype"`
	VocabSize             int           `json:"vocab_size"`
	Dim                   int           `json:"dim"`
	HiddenSize            int           `json:"hidden_size"`
	NLayers               int           `json:"n_layers"`
	NumHiddenLayers       int           `json:"num_hidden_layers"`
	NDenseLayers          int           `json:"n_dense_layers"`
	FirstKDenseReplace    int           `json:"first_k_dense_replace"`
	InterDim              int           `json:"inter_dim,omitempty"`
	IntermediateSize      int           `json:"intermediate_size,omitempty"`
	MoEInterDim           int           `json:"moe_inter_dim"`
	MoEIntermediateSize   int           `json:"moe_intermediate_size"`
	NRoutedExperts        int           `json:"n_routed_experts"`
	NSharedExperts        int           `json:"n_shared_experts"`
	NActivatedExperts     int           `json:"n_activated_experts"`
	NumExpertsPerTok      int           `json:"num_experts_per_tok"`
	QLoRARank             int           `json:"q_lora_rank"`
	NumAttentionHeads     int           `json:"num_attention_heads"`
	HeadDim               int           `json:"head_dim"`
	OGroups               int           `json:"o_groups"`
	OLoRARank             int           `json:"o_lora_rank"`
	IndexNHeads           int           `json:"index_n_heads"`
	IndexHeadDim          int           `json:"index_head_dim"`
	CompressRatios        []int         `json:"compress_ratios"`
	HCMult                int           `json:"hc_mult"`
	HCSinkhornIters       int           `json:"hc_sinkhorn_iters"`
	HCEps                 float64       `json:"hc_eps"`
	NumNextNPredictLayers int           `json:"num_nextn_predict_layers"`
	EngramLayerIDs        []int         `json:"engram_layer_ids"`
	VisionConfig          *visionConfig `json:"vision_config,omitempty"`
	QuantizationConfig    quantConfig   `json:"quantization_config"`
}

type visionConfig struct {
	Depth      int `json:"depth"`
	HiddenSize int `json:"hidden_size"`
	PatchSize  int `json:"patch_size"`
}

// quantConfig is the quantization_config of a V4.1 checkpoint (FORMATS.md).
type quantConfig struct {
	QuantMethod      string `json:"quant_method"`
	WeightBlockSize  [2]int `json:"weight_block_size"`
	ScaleFmt         string `json:"scale_fmt"`
	ExpertDType      string `json:"expert_dtype"`
	Fmt              string `json:"fmt"`
	ActivationScheme string `json:"activation_scheme"`
}

func newConfig(s *Spec) config {
	c := config{
		Architectures: []string{"DeepseekV4ForCausalLM"},
		ModelType:     "deepseek_v4",
		TorchDType:    "bfloat16",
		VocabSize:     s.Vocab,
		Dim:           s.Hidden, HiddenSize: s.Hidden,
		NLayers: s.Layers, NumHiddenLayers: s.Layers,
		NDenseLayers: s.DenseLayers, FirstKDenseReplace: s.DenseLayers,
		MoEInterDim: s.MoEInter, MoEIntermediateSize: s.MoEInter,
		NRoutedExperts:    s.Experts,
		NActivatedExperts: s.ActiveExperts, NumExpertsPerTok: s.ActiveExperts,
		QLoRARank: s.QLoRA, NumAttentionHeads: s.Heads, HeadDim: s.HeadDim,
		OGroups: s.OGroups, OLoRARank: s.OLoRA,
		IndexNHeads: s.IndexHeads, IndexHeadDim: s.IndexHeadDim,
		CompressRatios:        make([]int, s.Layers+s.MTPLayers), // MTP layers do not compress
		HCMult:                s.HCMult,
		HCSinkhornIters:       20,
		HCEps:                 1e-6,
		NumNextNPredictLayers: s.MTPLayers,
		EngramLayerIDs:        append([]int{}, s.EngramLayers...),
		QuantizationConfig: quantConfig{
			QuantMethod:      "fp8",
			WeightBlockSize:  [2]int{32, 32},
			ScaleFmt:         "ue8m0",
			ExpertDType:      "fp4",
			Fmt:              "e4m3",
			ActivationScheme: "dynamic",
		},
	}
	copy(c.CompressRatios, s.CompressRatios)
	if s.DenseLayers > 0 {
		c.InterDim, c.IntermediateSize = s.DenseInter, s.DenseInter
	}
	if s.SharedInter > 0 {
		c.NSharedExperts = 1
	}
	if s.VisionLayers > 0 {
		c.VisionConfig = &visionConfig{Depth: s.VisionLayers, HiddenSize: s.VisionDim, PatchSize: 16}
	}
	return c
}

// tokenizerConfig is a minimal tokenizer_config.json with DeepSeek's special
// tokens; there is no tokenizer.json (no vocabulary to load).
var tokenizerConfig = map[string]any{
	"add_bos_token":    true,
	"add_eos_token":    false,
	"bos_token":        "<｜begin▁of▁sentence｜>",
	"eos_token":        "<｜end▁of▁sentence｜>",
	"pad_token":        "<｜end▁of▁sentence｜>",
	"model_max_length": 1048576,
	"tokenizer_class":  "LlamaTokenizerFast",
}

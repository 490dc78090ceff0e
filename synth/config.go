package synth

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// num is a JSON number written with the text given, so that a config keeps
// Python's float spellings (10.0, 1e-06).
type num = json.Number

// v41Config is config.json of DeepSeek-V4.1-Flash (LAYOUTS.md §2.1): the
// language settings under text_config, the tower under vision_config,
// quantization_config and image_token_id at the root. Field order is the
// published dict's.
type v41Config struct {
	Architectures      []string    `json:"architectures"`
	ModelType          string      `json:"model_type"`
	DType              string      `json:"dtype"`
	TransformersVer    string      `json:"transformers_version"`
	BOSTokenID         int         `json:"bos_token_id"`
	EOSTokenID         int         `json:"eos_token_id"`
	PadTokenID         int         `json:"pad_token_id"`
	ImageTokenID       int         `json:"image_token_id"`
	QuantizationConfig quantConfig `json:"quantization_config"`
	TextConfig         v41Text     `json:"text_config"`
	VisionConfig       *v41Vision  `json:"vision_config,omitempty"`
}

type quantConfig struct {
	QuantMethod      string `json:"quant_method"`
	Fmt              string `json:"fmt,omitempty"`
	ActivationScheme string `json:"activation_scheme"`
	WeightBlockSize  [2]int `json:"weight_block_size"`
	ScaleFmt         string `json:"scale_fmt"`
	ExpertDType      string `json:"expert_dtype,omitempty"`
}

type ropeScaling struct {
	RopeType   string `json:"rope_type"`
	Factor     int    `json:"factor"`
	BetaFast   int    `json:"beta_fast"`
	BetaSlow   int    `json:"beta_slow"`
	OrigMaxPos int    `json:"original_max_position_embeddings"`
}

type v41Text struct {
	ModelType              string      `json:"model_type"`
	VocabSize              int         `json:"vocab_size"`
	HiddenSize             int         `json:"hidden_size"`
	MoEIntermediateSize    int         `json:"moe_intermediate_size"`
	NumHiddenLayers        int         `json:"num_hidden_layers"`
	NumAttentionHeads      int         `json:"num_attention_heads"`
	NumKeyValueHeads       int         `json:"num_key_value_heads"`
	HeadDim                int         `json:"head_dim"`
	QKRopeHeadDim          int         `json:"qk_rope_head_dim"`
	QLoRARank              int         `json:"q_lora_rank"`
	OLoRARank              int         `json:"o_lora_rank"`
	OGroups                int         `json:"o_groups"`
	HiddenAct              string      `json:"hidden_act"`
	SwiGLULimit            num         `json:"swiglu_limit"`
	RMSNormEps             num         `json:"rms_norm_eps"`
	AttentionBias          bool        `json:"attention_bias"`
	AttentionDropout       num         `json:"attention_dropout"`
	InitializerRange       num         `json:"initializer_range"`
	UseCache               bool        `json:"use_cache"`
	TieWordEmbeddings      bool        `json:"tie_word_embeddings"`
	MaxPositionEmbeddings  int         `json:"max_position_embeddings"`
	RopeTheta              int         `json:"rope_theta"`
	RopeScaling            ropeScaling `json:"rope_scaling"`
	NRoutedExperts         int         `json:"n_routed_experts"`
	NSharedExperts         int         `json:"n_shared_experts"`
	NumExpertsPerTok       int         `json:"num_experts_per_tok"`
	ScoringFunc            string      `json:"scoring_func"`
	TopkMethod             string      `json:"topk_method"`
	NormTopkProb           bool        `json:"norm_topk_prob"`
	RoutedScalingFactor    num         `json:"routed_scaling_factor"`
	SlidingWindow          int         `json:"sliding_window"`
	CompressRatios         []int       `json:"compress_ratios"`
	CompressRopeTheta      int         `json:"compress_rope_theta"`
	KVSourceLayerIDs       []int       `json:"kv_source_layer_ids"`
	IndexSourceLayerIDs    []int       `json:"index_source_layer_ids"`
	IndexNHeads            int         `json:"index_n_heads"`
	IndexHeadDim           int         `json:"index_head_dim"`
	IndexTopK              int         `json:"index_topk"`
	CandidateSourceLayerID int         `json:"candidate_source_layer_id"`
	CandidateTopKBlocks    int         `json:"candidate_topk_blocks"`
	CandidateBlockSize     int         `json:"candidate_block_size"`
	HCMult                 int         `json:"hc_mult"`
	HCSinkhornIters        int         `json:"hc_sinkhorn_iters"`
	HCEps                  num         `json:"hc_eps"`
	EngramLayerIDs         []int       `json:"engram_layer_ids"`
	EngramNumEmbeddings    []int64     `json:"engram_num_embeddings"`
	EngramMaxNgramSize     int         `json:"engram_max_ngram_size"`
	EngramVocabSize        int         `json:"engram_vocab_size"`
	EngramNHeads           int         `json:"engram_n_heads"`
	EngramHeadDim          int         `json:"engram_head_dim"`
	EngramPadTokenID       int         `json:"engram_pad_token_id"`
	EngramCompressedVocab  int         `json:"engram_compressed_vocab_size"`
	NumNextNPredictLayers  int         `json:"num_nextn_predict_layers"`
	DSparkBlockSize        int         `json:"dspark_block_size"`
	DSparkNoiseTokenID     int         `json:"dspark_noise_token_id"`
	DSparkTargetLayerIDs   []int       `json:"dspark_target_layer_ids"`
	DSparkMarkovRank       int         `json:"dspark_markov_rank"`
	DSparkNRoutedExperts   int         `json:"dspark_n_routed_experts"`
	DSparkNumExpertsPerTok int         `json:"dspark_num_experts_per_tok"`
}

type v41Vision struct {
	ModelType         string `json:"model_type"`
	NumHiddenLayers   int    `json:"num_hidden_layers"`
	HiddenSize        int    `json:"hidden_size"`
	NumAttentionHeads int    `json:"num_attention_heads"`
	IntermediateSize  int    `json:"intermediate_size"`
	PatchSize         int    `json:"patch_size"`
	RopeTheta         int    `json:"rope_theta"`
	DownsampleRatio   int    `json:"downsample_ratio"`
	MaxImageTokens    int    `json:"max_image_tokens"`
	MinPixels         int    `json:"min_pixels"`
	MaxWHRatio        *int   `json:"max_wh_ratio"`
}

// The settings of the release that no tensor shape shows; the tiny presets
// keep them, but for Engram's hashing (Spec.EngramVocab, Spec.EngramKeys).
const (
	v41ImageTokenID  = 129264
	v41Window        = 128
	v41IndexTopK     = 512
	v41CandTopK      = 2048
	v41CandBlock     = 8
	v41EngramVocab   = 16000000
	v41EngramCVocab  = 99092
	v41DSparkBlock   = 5
	v41DSparkNoiseID = 128799
	v41DSparkTopK    = 3
)

// configRatios is compress_ratios as the configs give it: one entry per
// main layer and MTP stage (the stages do not compress).
func configRatios(s *Spec) []int {
	r := make([]int, s.Layers+s.MTPLayers)
	copy(r, s.CompressRatios)
	return r
}

// candidateSource is the candidate source layer: the last KV source.
func candidateSource(s *Spec) int {
	if len(s.KVSourceLayers) == 0 {
		return 0
	}
	return s.KVSourceLayers[len(s.KVSourceLayers)-1]
}

// engramVocab is engram_vocab_size: the spec's or the release's.
func (s *Spec) engramVocab() int {
	if s.EngramVocab > 0 {
		return s.EngramVocab
	}
	return v41EngramVocab
}

// engramKeys is engram_compressed_vocab_size: the spec's or the release's.
func (s *Spec) engramKeys() int {
	if s.EngramKeys > 0 {
		return s.EngramKeys
	}
	return v41EngramCVocab
}

func engramTableRows(s *Spec) []int64 {
	rows := make([]int64, len(s.EngramLayers))
	for i := range rows {
		rows[i] = s.engramRows(i)
	}
	return rows
}

func newV41Config(s *Spec) v41Config {
	shared := 0
	if s.SharedInter > 0 {
		shared = 1
	}
	c := v41Config{
		Architectures: []string{"DeepseekV41ForCausalLM"}, ModelType: "deepseek_v41",
		DType: "bfloat16", TransformersVer: "5.6.0",
		BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2, ImageTokenID: v41ImageTokenID,
		QuantizationConfig: quantConfig{QuantMethod: "fp8", ActivationScheme: "dynamic",
			WeightBlockSize: [2]int{s.fp8Block(), s.fp8Block()}, ScaleFmt: "ue8m0", ExpertDType: "fp4"},
		TextConfig: v41Text{
			ModelType: "deepseek_v41_text", VocabSize: s.Vocab, HiddenSize: s.Hidden,
			MoEIntermediateSize: s.MoEInter, NumHiddenLayers: s.Layers,
			NumAttentionHeads: s.Heads, NumKeyValueHeads: 1, HeadDim: s.HeadDim, QKRopeHeadDim: 64,
			QLoRARank: s.QLoRA, OLoRARank: s.OLoRA, OGroups: s.OGroups,
			HiddenAct: "silu", SwiGLULimit: "10.0", RMSNormEps: "1e-20",
			AttentionDropout: "0.0", InitializerRange: "0.02", UseCache: true,
			MaxPositionEmbeddings: 1048576, RopeTheta: 10000,
			RopeScaling:    ropeScaling{RopeType: "yarn", Factor: 16, BetaFast: 32, BetaSlow: 1, OrigMaxPos: 65536},
			NRoutedExperts: s.Experts, NSharedExperts: shared, NumExpertsPerTok: s.ActiveExperts,
			ScoringFunc: "sqrtsoftplus", TopkMethod: "noaux_tc", NormTopkProb: true,
			RoutedScalingFactor: "1.5", SlidingWindow: v41Window,
			CompressRatios: configRatios(s), CompressRopeTheta: 160000,
			KVSourceLayerIDs: nonNil(s.KVSourceLayers), IndexSourceLayerIDs: nonNil(s.IndexSourceLayers),
			IndexNHeads: s.IndexHeads, IndexHeadDim: s.IndexHeadDim, IndexTopK: v41IndexTopK,
			CandidateSourceLayerID: candidateSource(s), CandidateTopKBlocks: v41CandTopK,
			CandidateBlockSize: v41CandBlock,
			HCMult:             s.HCMult, HCSinkhornIters: 20, HCEps: "1e-06",
			EngramLayerIDs: nonNil(s.EngramLayers), EngramNumEmbeddings: engramTableRows(s),
			EngramMaxNgramSize: engramOrders + 1, EngramVocabSize: s.engramVocab(),
			EngramNHeads: s.EngramHeads, EngramHeadDim: engramDim, EngramPadTokenID: 2,
			EngramCompressedVocab: s.engramKeys(),
			NumNextNPredictLayers: s.MTPLayers, DSparkBlockSize: v41DSparkBlock,
			DSparkNoiseTokenID: v41DSparkNoiseID, DSparkTargetLayerIDs: nonNil(s.DSparkTargets),
			DSparkMarkovRank: s.MarkovRank, DSparkNRoutedExperts: s.MTPExperts,
			DSparkNumExpertsPerTok: v41DSparkTopK,
		},
	}
	if s.VisionLayers > 0 {
		c.VisionConfig = &v41Vision{ModelType: "deepseek_v41_vision", NumHiddenLayers: s.VisionLayers,
			HiddenSize: s.VisionDim, NumAttentionHeads: s.VisionHeads, IntermediateSize: s.VisionInter,
			PatchSize: 14, RopeTheta: 10000, DownsampleRatio: 3, MaxImageTokens: 1024, MinPixels: 295936}
	}
	return c
}

func nonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

// kv is one key of an inference/config.json with its JSON text.
type kv struct{ key, val string }

func ints(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func int64s(v []int64) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func itoa(n int) string { return strconv.Itoa(n) }

// inferenceJSON writes DeepSeek's inference/config.json formatting:
// four-space indent, lists on one line, a final newline.
func inferenceJSON(keys []kv) []byte {
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, k := range keys {
		b.WriteString(`    "` + k.key + `": ` + k.val)
		if i < len(keys)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// newV41Inference is inference/config.json of DeepSeek-V4.1-Flash
// (LAYOUTS.md §2.2), key for key.
func newV41Inference(s *Spec) []byte {
	return inferenceJSON([]kv{
		{"vocab_size", itoa(s.Vocab)}, {"dim", itoa(s.Hidden)}, {"moe_inter_dim", itoa(s.MoEInter)},
		{"n_layers", itoa(s.Layers)}, {"n_mtp_layers", itoa(s.MTPLayers)},
		{"dspark_block_size", itoa(v41DSparkBlock)}, {"dspark_noise_token_id", itoa(v41DSparkNoiseID)},
		{"dspark_target_layer_ids", ints(s.DSparkTargets)}, {"dspark_markov_rank", itoa(s.MarkovRank)},
		{"dspark_n_routed_experts", itoa(s.MTPExperts)}, {"dspark_n_activated_experts", itoa(v41DSparkTopK)},
		{"n_heads", itoa(s.Heads)}, {"n_routed_experts", itoa(s.Experts)},
		{"n_shared_experts", itoa(min(1, s.SharedInter))}, {"n_activated_experts", itoa(s.ActiveExperts)},
		{"score_func", `"sqrtsoftplus"`}, {"route_scale", "1.5"}, {"swiglu_limit", "10.0"},
		{"q_lora_rank", itoa(s.QLoRA)}, {"head_dim", itoa(s.HeadDim)}, {"rope_head_dim", "64"},
		{"norm_eps", "1e-20"}, {"o_groups", itoa(s.OGroups)}, {"o_lora_rank", itoa(s.OLoRA)},
		{"window_size", itoa(v41Window)},
		{"kv_source_layers", ints(s.KVSourceLayers)}, {"index_source_layers", ints(s.IndexSourceLayers)},
		{"original_seq_len", "65536"}, {"rope_theta", "10000"}, {"rope_factor", "16"},
		{"beta_fast", "32"}, {"beta_slow", "1"},
		{"index_n_heads", itoa(s.IndexHeads)}, {"index_head_dim", itoa(s.IndexHeadDim)},
		{"index_topk", itoa(v41IndexTopK)}, {"candidate_source_layer", itoa(candidateSource(s))},
		{"candidate_topk_blocks", itoa(v41CandTopK)}, {"candidate_block_size", itoa(v41CandBlock)},
		{"hc_mult", itoa(s.HCMult)}, {"hc_sinkhorn_iters", "20"}, {"hc_eps", "1e-06"},
		{"engram_layer_ids", ints(s.EngramLayers)}, {"engram_vocab_size", itoa(s.engramVocab())},
		{"engram_num_embeddings", int64s(engramTableRows(s))},
		{"engram_max_ngram_size", itoa(engramOrders + 1)}, {"engram_pad_id", "2"},
		{"engram_compressed_vocab_size", itoa(s.engramKeys())},
		{"dtype", `"fp8"`}, {"expert_dtype", `"fp4"`}, {"compress_rope_theta", "160000"},
		{"compress_ratios", ints(configRatios(s))},
		{"vision_n_layers", itoa(s.VisionLayers)}, {"vision_dim", itoa(s.VisionDim)},
		{"vision_n_heads", itoa(s.VisionHeads)}, {"vision_inter_dim", itoa(s.VisionInter)},
		{"vision_patch_size", "14"}, {"vision_downsample_ratio", "3"}, {"vision_max_n_token", "1024"},
		{"vision_min_pixels", "295936"}, {"vision_max_wh_ratio", "null"},
		{"image_token_id", itoa(v41ImageTokenID)},
		{"engram_n_heads", itoa(s.EngramHeads)}, {"engram_head_dim", itoa(engramDim)},
		{"vision_rope_theta", "10000"},
	})
}

// v4Config is config.json of DeepSeek-V4-Flash (LAYOUTS.md §13.1): flat,
// expert_dtype at the top level, 128x128 FP8 blocks. LAYOUTS.md lists the
// keys that differ from V4.1; the MQA head count, the context length (the
// YaRN factor times its original length) and top-k normalisation, which
// every transformers config of the family carries and llama.cpp's
// deepseek4 needs, are V4.1's values.
type v4Config struct {
	Architectures         []string    `json:"architectures"`
	ModelType             string      `json:"model_type"`
	TorchDType            string      `json:"torch_dtype"`
	VocabSize             int         `json:"vocab_size"`
	HiddenSize            int         `json:"hidden_size"`
	NumHiddenLayers       int         `json:"num_hidden_layers"`
	NumHashLayers         int         `json:"num_hash_layers"`
	NumNextNPredictLayers int         `json:"num_nextn_predict_layers"`
	NumAttentionHeads     int         `json:"num_attention_heads"`
	NumKeyValueHeads      int         `json:"num_key_value_heads"`
	HeadDim               int         `json:"head_dim"`
	QKRopeHeadDim         int         `json:"qk_rope_head_dim"`
	QLoRARank             int         `json:"q_lora_rank"`
	OGroups               int         `json:"o_groups"`
	OLoRARank             int         `json:"o_lora_rank"`
	NRoutedExperts        int         `json:"n_routed_experts"`
	NSharedExperts        int         `json:"n_shared_experts"`
	MoEIntermediateSize   int         `json:"moe_intermediate_size"`
	NumExpertsPerTok      int         `json:"num_experts_per_tok"`
	ScoringFunc           string      `json:"scoring_func"`
	NormTopkProb          bool        `json:"norm_topk_prob"`
	RoutedScalingFactor   num         `json:"routed_scaling_factor"`
	SwiGLULimit           num         `json:"swiglu_limit"`
	IndexNHeads           int         `json:"index_n_heads"`
	IndexHeadDim          int         `json:"index_head_dim"`
	IndexTopK             int         `json:"index_topk"`
	HCMult                int         `json:"hc_mult"`
	HCSinkhornIters       int         `json:"hc_sinkhorn_iters"`
	HCEps                 num         `json:"hc_eps"`
	RMSNormEps            num         `json:"rms_norm_eps"`
	SlidingWindow         int         `json:"sliding_window"`
	MaxPositionEmbeddings int         `json:"max_position_embeddings"`
	RopeTheta             int         `json:"rope_theta"`
	CompressRopeTheta     int         `json:"compress_rope_theta"`
	RopeScaling           ropeScaling `json:"rope_scaling"`
	CompressRatios        []int       `json:"compress_ratios"`
	ExpertDType           string      `json:"expert_dtype"`
	QuantizationConfig    quantConfig `json:"quantization_config"`
}

func newV4Config(s *Spec) v4Config {
	return v4Config{
		Architectures: []string{"DeepseekV4ForCausalLM"}, ModelType: "deepseek_v4", TorchDType: "bfloat16",
		VocabSize: s.Vocab, HiddenSize: s.Hidden, NumHiddenLayers: s.Layers, NumHashLayers: s.HashLayers,
		NumNextNPredictLayers: s.MTPLayers, NumAttentionHeads: s.Heads, NumKeyValueHeads: 1, HeadDim: s.HeadDim,
		QKRopeHeadDim: 64, QLoRARank: s.QLoRA, OGroups: s.OGroups, OLoRARank: s.OLoRA,
		NRoutedExperts: s.Experts, NSharedExperts: min(1, s.SharedInter), MoEIntermediateSize: s.MoEInter,
		NumExpertsPerTok: s.ActiveExperts, ScoringFunc: "sqrtsoftplus", NormTopkProb: true, RoutedScalingFactor: "1.5",
		SwiGLULimit: "10.0", IndexNHeads: s.IndexHeads, IndexHeadDim: s.IndexHeadDim, IndexTopK: 512,
		HCMult: s.HCMult, HCSinkhornIters: 20, HCEps: "1e-06", RMSNormEps: "1e-06", SlidingWindow: 128,
		MaxPositionEmbeddings: 1048576, RopeTheta: 10000, CompressRopeTheta: 160000,
		RopeScaling:    ropeScaling{RopeType: "yarn", Factor: 16, BetaFast: 32, BetaSlow: 1, OrigMaxPos: 65536},
		CompressRatios: configRatios(s), ExpertDType: "fp4",
		QuantizationConfig: quantConfig{QuantMethod: "fp8", Fmt: "e4m3", ActivationScheme: "dynamic",
			WeightBlockSize: [2]int{s.fp8Block(), s.fp8Block()}, ScaleFmt: "ue8m0"},
	}
}

// newV4Inference is inference/config.json of DeepSeek-V4-Flash: ModelArgs'
// spellings with dtype, scale_fmt and expert_dtype.
func newV4Inference(s *Spec) []byte {
	return inferenceJSON([]kv{
		{"vocab_size", itoa(s.Vocab)}, {"dim", itoa(s.Hidden)}, {"moe_inter_dim", itoa(s.MoEInter)},
		{"n_layers", itoa(s.Layers)}, {"n_hash_layers", itoa(s.HashLayers)}, {"n_mtp_layers", itoa(s.MTPLayers)},
		{"n_heads", itoa(s.Heads)}, {"n_routed_experts", itoa(s.Experts)},
		{"n_shared_experts", itoa(min(1, s.SharedInter))}, {"n_activated_experts", itoa(s.ActiveExperts)},
		{"score_func", `"sqrtsoftplus"`}, {"route_scale", "1.5"}, {"swiglu_limit", "10.0"},
		{"q_lora_rank", itoa(s.QLoRA)}, {"head_dim", itoa(s.HeadDim)}, {"rope_head_dim", "64"},
		{"norm_eps", "1e-06"}, {"o_groups", itoa(s.OGroups)}, {"o_lora_rank", itoa(s.OLoRA)},
		{"window_size", "128"}, {"original_seq_len", "65536"}, {"rope_theta", "10000"},
		{"rope_factor", "16"}, {"beta_fast", "32"}, {"beta_slow", "1"},
		{"index_n_heads", itoa(s.IndexHeads)}, {"index_head_dim", itoa(s.IndexHeadDim)}, {"index_topk", "512"},
		{"hc_mult", itoa(s.HCMult)}, {"hc_sinkhorn_iters", "20"}, {"hc_eps", "1e-06"},
		{"dtype", `"fp8"`}, {"scale_fmt", `"ue8m0"`}, {"expert_dtype", `"fp4"`},
		{"compress_rope_theta", "160000"}, {"compress_ratios", ints(configRatios(s))},
	})
}

// tokenizerConfig is a minimal tokenizer_config.json with DeepSeek's special
// tokens (writeTokenizer sets the pad token).
var tokenizerConfig = map[string]any{
	"add_bos_token":    true,
	"add_eos_token":    false,
	"bos_token":        "<｜begin▁of▁sentence｜>",
	"eos_token":        "<｜end▁of▁sentence｜>",
	"pad_token":        "<｜end▁of▁sentence｜>",
	"model_max_length": 1048576,
	"tokenizer_class":  "LlamaTokenizerFast",
}

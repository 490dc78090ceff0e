package deepseek2

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
)

func init() {
	for _, c := range []checkpoint.Family{checkpoint.DeepSeekV2, checkpoint.DeepSeekV3, checkpoint.FamilyOther} {
		trace.Register(c, Family{})
	}
}

// Family is trace/'s family of DeepSeek-V2, V2-Lite, V3 and R1, and of
// configs written as DeepSeek's ModelArgs: their layers run on a
// backend.Backend, and their trace.json is the seed's
// (trace_v2_lite.py), with one record per layer and no logits.
type Family struct{}

// Open implements trace.Family.
func (Family) Open(cat *checkpoint.Catalog, _ *tokenizer.Tokenizer) (trace.Model, error) {
	m, err := Open(cat)
	if err != nil {
		return nil, err
	}
	return traced{m}, nil
}

// traced is a Model as trace.Model.
type traced struct{ m *Model }

func (t traced) Vocab() int  { return t.m.Config.Vocab }
func (t traced) Layers() int { return t.m.Config.Layers }

func (t traced) Problems() []string {
	var out []string
	for l := range t.m.Checked() {
		for _, p := range t.m.Problems(l) {
			out = append(out, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	return out
}

// Trace implements trace.Model: the prompts' layers run on opt.Backend
// (the CPU when nil).
func (t traced) Trace(prompts []trace.Prompt, opt trace.Options) (trace.Tracer, error) {
	b := opt.Backend
	if b == nil {
		b = backend.NewCPU()
	}
	tr := &tracer{m: t.m, b: b, prompts: prompts, tok: opt.Tokenizer}
	for _, p := range prompts {
		tr.lens = append(tr.lens, len(p.TokenIDs))
	}
	cfg := t.m.Config
	tr.core = trace.NewCore[[]float32, Output, LayerRecord, struct{}](tr, trace.Spec[[]float32, Output, LayerRecord, struct{}]{
		Layers: cfg.Layers, Runnable: t.m.Runnable(), Backend: b.Name(),
		Start: func(rows []float32) []float32 { return rows }, Started: opt.Started,
		Run: func(o *Output) trace.Run[[]float32] {
			return trace.Run[[]float32]{Layer: o.Layer, Next: o.HiddenOut, Load: o.LoadTime, Total: o.Time,
				Note: []any{"weight_mib", o.WeightBytes >> 20}}
		},
		Record:  func(in []float32, o *Output) *LayerRecord { return tr.record(o.Layer, in, o) },
		Tensors: tr.tensors,
		Rows:    rows,
		Report:  tr.report,
		Cost:    tr.cost,
		Routing: func(r *LayerRecord) *trace.RoutingTrace { return r.Routing },
	}, prompts, opt.Tokenizer, opt.Log)
	return tr.core, nil
}

// tracer is what the core runs a V2/V3 model through.
type tracer struct {
	m       *Model
	b       backend.Backend
	prompts []trace.Prompt
	tok     *tokenizer.Tokenizer
	lens    []int
	core    *trace.Core[[]float32, Output, LayerRecord, struct{}]
}

func (tr *tracer) EmbedRows(ids []int) ([]float32, error) { return tr.m.EmbedRows(ids) }

func (tr *tracer) Forward(ctx context.Context, l int, in []float32) (*Output, error) {
	return tr.m.Forward(ctx, tr.b, l, in, tr.lens)
}

func (tr *tracer) Logits(context.Context, []float32) (*struct{}, error) {
	return nil, errors.New("the V2/V3 trace runs no head")
}

func (tr *tracer) LayerTensors(l int) (tensors int, elements, bytes int64) {
	return tr.m.LayerTensors(l)
}

// kinds are the activations recorded per prompt, in file order.
var kinds = []string{"attn_out", "ffn_out", "hidden_out", "kv_latent", "k_pe", "topk_ids", "topk_weights"}

// tensors lists a prompt's activations of layer l; their shapes follow
// from the config and the prompt alone.
func (tr *tracer) tensors(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64)) {
	cfg := tr.m.Config
	for _, k := range kinds {
		dt, cols := safetensors.F32, 0
		switch k {
		case "attn_out", "ffn_out", "hidden_out":
			cols = cfg.Hidden
		case "kv_latent":
			cols = cfg.KVLoRA
		case "k_pe":
			cols = cfg.QKRope
		case "topk_ids", "topk_weights":
			if !cfg.IsMoE(l) {
				continue
			}
			cols = cfg.TopK
			if k == "topk_ids" {
				dt = safetensors.I32
			}
		}
		add(k, dt, T, int64(cols))
	}
}

// rows is where activation a of a layer's outputs lies: every prompt's
// rows.
func rows(out *Output, a trace.Activation) (trace.ActivationRows, error) {
	switch a.Kind {
	case "attn_out":
		return trace.ActivationRows{F32: out.AttnOut}, nil
	case "ffn_out":
		return trace.ActivationRows{F32: out.FFNOut}, nil
	case "hidden_out":
		return trace.ActivationRows{F32: out.HiddenOut}, nil
	case "kv_latent":
		return trace.ActivationRows{F32: out.KVLatent}, nil
	case "k_pe":
		return trace.ActivationRows{F32: out.KPE}, nil
	case "topk_ids":
		return trace.ActivationRows{I32: out.Routes.IDs}, nil
	case "topk_weights":
		return trace.ActivationRows{F32: out.Routes.Weights}, nil
	}
	return trace.ActivationRows{}, fmt.Errorf("%s: no activation %s in layer %d", a.Name, a.Kind, out.Layer)
}

// cost estimates what tracing the prompts holds.
func (tr *tracer) cost(lens []int, tensors int) trace.Cost {
	c := tr.m.Config
	latent := int64(c.KVLoRA + c.QKRope)
	ffn := int64(max(c.Inter, c.TopK*c.MoEInter+c.SharedInter()))
	return trace.CostModel{
		Layers:    tr.m.Runnable(),
		State:     4 * int64(c.Hidden),
		Output:    4 * (3*int64(c.Hidden) + 2*latent + 2*int64(c.TopK)),
		Work:      4 * (int64(c.Heads)*int64(c.QKHead()+c.KVLoRA+c.VHead) + 3*ffn + 4*int64(c.Hidden)),
		Quadratic: 0, // attention runs a query row at a time
		Experts:   c.RoutedExperts,
		TopK:      c.TopK,
		Tensors:   tensors,
	}.Cost(lens)
}

// LayerRecord is layers/NN.json: the seed's per-layer record, for a layer
// run on the CPU or a device by this engine.
type LayerRecord struct {
	Layer int    `json:"layer"`
	FFN   string `json:"ffn"` // dense or moe
	// The layer's tensors in the checkpoint.
	StateTensors int   `json:"state_tensors"`
	StateNumel   int64 `json:"state_numel"`
	StateBytes   int64 `json:"state_bytes"`
	// WeightBytesRead is what the forward read: routed experts only where
	// a token selected them.
	WeightBytesRead  int64       `json:"weight_bytes_read"`
	RoutedExpertsRun *int        `json:"routed_experts_run,omitempty"`
	TimingMS         LayerTiming `json:"timing_ms"`
	// PeakDeviceAllocatedMiB is null on the CPU backend.
	PeakDeviceAllocatedMiB *trace.Num          `json:"peak_device_allocated_mib"`
	HiddenBefore           trace.HiddenStats   `json:"hidden_before"`
	HiddenAfter            trace.HiddenStats   `json:"hidden_after"`
	MLA                    MLAStats            `json:"mla"`
	Routing                *trace.RoutingTrace `json:"routing,omitempty"`
}

// LayerTiming is where a layer's time went, in the seed's terms.
type LayerTiming struct {
	LoadCPU trace.Num `json:"load_cpu"` // reading and decoding weights on the host
	// TransferToDevice is null on the CPU backend.
	TransferToDevice *trace.Num `json:"transfer_to_device"`
	Forward          trace.Num  `json:"forward"` // the whole forward, loading included
}

// MLAStats describes the attention's compressed KV path.
type MLAStats struct {
	// kv_a_proj_with_mqa's raw output [tokens, kv_lora + rope] and its
	// two parts before kv_a_layernorm and RoPE.
	CompressedProjectionShape []int     `json:"compressed_projection_shape"`
	LatentShape               []int     `json:"latent_shape"`
	RopeKeyShape              []int     `json:"rope_key_shape"`
	LatentRMS                 trace.Num `json:"latent_rms"`
	RopeKeyRMS                trace.Num `json:"rope_key_rms"`
	// The latent cache MLA keeps per token (normalised latent + rotated
	// key), against the expanded per-head K/V that HF's eager attention
	// keeps ([tokens, heads, dim]), at the checkpoint's BF16 width.
	LatentCacheShape     []int `json:"latent_cache_shape"`
	LatentCacheBytes     int64 `json:"latent_cache_bytes"`
	EagerKeyCacheShape   []int `json:"eager_key_cache_shape"`
	EagerValueCacheShape []int `json:"eager_value_cache_shape"`
	EagerCacheBytes      int64 `json:"eager_cache_bytes"`
}

// cacheDTypeBytes is the width of a cached value in the accounting: BF16,
// the activation type of the released models.
const cacheDTypeBytes = 2

// record builds layer l's record from its input and output.
func (tr *tracer) record(l int, in []float32, out *Output) *LayerRecord {
	cfg := tr.m.Config
	d := cfg.Hidden
	tensors, numel, bytes := tr.m.LayerTensors(l)
	r := &LayerRecord{
		Layer:           l,
		FFN:             "dense",
		StateTensors:    tensors,
		StateNumel:      numel,
		StateBytes:      bytes,
		WeightBytesRead: out.WeightBytes,
		TimingMS: LayerTiming{
			LoadCPU: trace.Num(out.LoadTime.Seconds() * 1000),
			Forward: trace.Num(out.Time.Seconds() * 1000),
		},
		HiddenBefore: trace.HiddenOf(in, d),
		HiddenAfter:  trace.HiddenOf(out.HiddenOut, d),
	}
	n := out.Tokens
	kvl, rope := cfg.KVLoRA, cfg.QKRope
	r.MLA = MLAStats{
		CompressedProjectionShape: []int{n, kvl + rope},
		LatentShape:               []int{n, kvl},
		RopeKeyShape:              []int{n, rope},
		LatentRMS:                 trace.RMS(out.KVA, kvl+rope, 0, kvl),
		RopeKeyRMS:                trace.RMS(out.KVA, kvl+rope, kvl, rope),
		LatentCacheShape:          []int{n, kvl + rope},
		LatentCacheBytes:          int64(n) * int64(kvl+rope) * cacheDTypeBytes,
		EagerKeyCacheShape:        []int{n, cfg.Heads, cfg.QKHead()},
		EagerValueCacheShape:      []int{n, cfg.Heads, cfg.VHead},
		EagerCacheBytes:           int64(n) * int64(cfg.Heads*(cfg.QKHead()+cfg.VHead)) * cacheDTypeBytes,
	}
	if out.Routes != nil {
		r.FFN = "moe"
		run := out.ExpertsRun
		r.RoutedExpertsRun = &run
		r.Routing = trace.Routing(tr.prompts, tr.tok, cfg.RoutedExperts, trace.Routes(*out.Routes))
	}
	return r
}

// Report is trace.json, the report of the whole trace as the seed writes
// it.
type Report struct {
	SchemaVersion    int               `json:"schema_version"`
	CapturedAtUTC    string            `json:"captured_at_utc"`
	EvidenceIdentity string            `json:"evidence_identity"`
	Boundary         Boundary          `json:"boundary"`
	Provenance       Provenance        `json:"provenance"`
	Environment      trace.Environment `json:"environment"`
	Configuration    Configuration     `json:"configuration"`
	Prompts          []trace.Prompt    `json:"prompts"`
	Execution        Execution         `json:"execution"`
	CacheAccounting  CacheAccounting   `json:"cache_accounting"`
}

// Boundary says what the trace is and is not.
type Boundary struct {
	Model                      string   `json:"model"`
	ExecutedLayers             []int    `json:"executed_layers"`
	TotalModelLayers           int      `json:"total_model_layers"`
	Reference                  string   `json:"reference"`
	FullModelGeneration        bool     `json:"full_model_generation"`
	TrainingOrGlobalExpertLoad bool     `json:"training_or_global_expert_load"`
	ExpertSemanticsInferred    bool     `json:"expert_semantics_inferred"`
	PromptSample               string   `json:"prompt_sample"`
	CacheNote                  string   `json:"cache_note"`
	Problems                   []string `json:"problems,omitempty"`
}

// Provenance identifies the checkpoint.
type Provenance struct {
	Source                string            `json:"source"`
	Naming                string            `json:"tensor_naming"`
	SHA256                map[string]string `json:"sha256"`
	CheckpointTensorBytes int64             `json:"checkpoint_tensor_bytes"`
	Shards                int               `json:"shards"`
}

// Configuration is the model's shape as config.json gives it.
type Configuration struct {
	ModelType           string   `json:"model_type"`
	Architectures       []string `json:"architectures"`
	Layers              int      `json:"layers"`
	Hidden              int      `json:"hidden"`
	Vocab               int      `json:"vocab"`
	AttentionHeads      int      `json:"attention_heads"`
	QLoRARank           int      `json:"q_lora_rank"`
	KVLoRARank          int      `json:"kv_lora_rank"`
	QKNopeHeadDim       int      `json:"qk_nope_head_dim"`
	QKRopeHeadDim       int      `json:"qk_rope_head_dim"`
	VHeadDim            int      `json:"v_head_dim"`
	DenseIntermediate   int      `json:"dense_intermediate"`
	RoutedExperts       int      `json:"routed_experts"`
	ActiveRoutedExperts int      `json:"active_routed_experts"`
	SharedExperts       int      `json:"shared_experts"`
	ExpertIntermediate  int      `json:"expert_intermediate"`
	FirstDenseLayers    int      `json:"first_dense_layers"`
	RouterScoring       string   `json:"router_scoring"`
	RouterTopKMethod    string   `json:"router_topk_method"`
	ExpertGroups        int      `json:"expert_groups"`
	TopKGroups          int      `json:"topk_groups"`
	NormalizeSelected   bool     `json:"normalize_selected_weights"`
	RoutedScalingFactor float64  `json:"routed_scaling_factor"`
	RMSNormEps          float64  `json:"rms_norm_eps"`
	RopeTheta           float64  `json:"rope_theta"`
	RopeScaling         any      `json:"rope_scaling"`
	SoftmaxScale        float64  `json:"softmax_scale"`
}

// Execution is what ran.
type Execution struct {
	Prompts       int                  `json:"prompts"`
	ValidTokens   int                  `json:"valid_tokens"`
	Batching      string               `json:"batching"`
	TimingMS      map[string]trace.Num `json:"timing_ms"`
	InitialHidden trace.HiddenStats    `json:"initial_hidden"`
	Layers        []*LayerRecord       `json:"layers"`
	FinalHidden   trace.HiddenStats    `json:"final_hidden"`
}

// CacheAccounting compares MLA's latent cache with expanded K/V.
type CacheAccounting struct {
	DType                        string         `json:"dtype"`
	LatentElementsPerTokenLayer  int            `json:"latent_elements_per_token_layer"`
	LatentBytesPerTokenLayer     int            `json:"latent_bytes_per_token_layer"`
	HFEagerElementsPerTokenLayer int            `json:"hf_eager_elements_per_token_layer"`
	HFEagerBytesPerTokenLayer    int            `json:"hf_eager_bytes_per_token_layer"`
	EagerOverLatentRatio         float64        `json:"eager_over_latent_ratio"`
	LatentReductionVsEager       float64        `json:"latent_reduction_vs_eager"`
	Components                   map[string]int `json:"components"`
}

// report is trace.json: every traceable layer run on every prompt.
func (tr *tracer) report(ctx context.Context, c *trace.Core[[]float32, Output, LayerRecord, struct{}]) (any, error) {
	if err := c.RunAll(ctx); err != nil {
		return nil, err
	}
	records, err := c.Records(ctx)
	if err != nil {
		return nil, err
	}
	initial, final, err := c.Input(ctx)
	if err != nil {
		return nil, err
	}
	cfg := tr.m.Config
	n := c.Layers()
	layers := make([]int, n)
	for i := range layers {
		layers[i] = i
	}
	var problems []string
	for l := range tr.m.Checked() {
		problems = append(problems, tr.m.Problems(l)...)
	}
	env := trace.HostEnvironment(tr.b.Name(), tr.b.Device())
	return Report{
		SchemaVersion:    trace.SchemaVersion,
		CapturedAtUTC:    trace.CapturedAt(),
		EvidenceIdentity: "dsfs trace / checkpoint weights and tokenizer, per-layer forward in float32",
		Boundary: Boundary{
			Model:                      modelName(cfg),
			ExecutedLayers:             layers,
			TotalModelLayers:           cfg.Layers,
			Reference:                  "deepseek-ai/DeepSeek-V3 inference/model.py @9b4e978 semantics (absorbed MLA, float32); routing weights as the Hugging Face file of the model type",
			FullModelGeneration:        false,
			TrainingOrGlobalExpertLoad: false,
			ExpertSemanticsInferred:    false,
			PromptSample:               fmt.Sprintf("%d prompts; descriptive trace, not population estimate", len(tr.prompts)),
			CacheNote:                  "the engine caches MLA's latent (kv_lora + rope per token); the eager K/V figures are what HF's eager attention would hold",
			Problems:                   problems,
		},
		Provenance:    provenance(tr.m.Catalog(), tr.m.Naming),
		Environment:   env,
		Configuration: configuration(cfg),
		Prompts:       tr.prompts,
		Execution: Execution{
			Prompts:       len(tr.prompts),
			ValidTokens:   c.Tokens(),
			Batching:      "every prompt's tokens in one batch for the projections and experts; attention per prompt, causal, positions from 0",
			TimingMS:      map[string]trace.Num{"embedding": trace.Num(c.EmbedTime().Seconds() * 1000)},
			InitialHidden: trace.HiddenOf(*initial, cfg.Hidden),
			Layers:        records,
			FinalHidden:   trace.HiddenOf(*final, cfg.Hidden),
		},
		CacheAccounting: cacheAccounting(cfg),
	}, nil
}

func modelName(cfg *Config) string {
	s := cfg.ModelType
	if s == "" {
		s = "DeepSeek (ModelArgs config)"
	}
	if len(cfg.Architectures) > 0 {
		s += " / " + cfg.Architectures[0]
	}
	return s
}

func provenance(cat *checkpoint.Catalog, naming Naming) Provenance {
	p := Provenance{Source: cat.Dir, Naming: naming.String(), SHA256: map[string]string{}, Shards: len(cat.Shards)}
	hash := func(b []byte) string {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	if cat.ConfigBytes != nil {
		p.SHA256["config"] = hash(cat.ConfigBytes)
	}
	if cat.IndexSHA256 != "" {
		p.SHA256["index"] = cat.IndexSHA256
	}
	for _, f := range cat.Files {
		key := map[string]string{"tokenizer.json": "tokenizer", "tokenizer_config.json": "tokenizer_config"}[f.Name]
		if key == "" {
			continue
		}
		if b, err := cat.ReadFile(f.Name, tokenizer.MaxFileSize); err == nil {
			sum := sha256.Sum256(b)
			p.SHA256[key] = hex.EncodeToString(sum[:])
		}
	}
	for _, t := range cat.Tensors {
		p.CheckpointTensorBytes += t.Size
	}
	return p
}

func configuration(c *Config) Configuration {
	var rope any
	if y := c.YaRN; y != nil {
		rope = map[string]any{
			"type": "yarn", "factor": y.Factor, "original_max_position_embeddings": y.OrigMaxPos,
			"beta_fast": y.BetaFast, "beta_slow": y.BetaSlow, "mscale": y.MScale, "mscale_all_dim": y.MScaleAllDim,
		}
	}
	return Configuration{
		ModelType: c.ModelType, Architectures: c.Architectures,
		Layers: c.Layers, Hidden: c.Hidden, Vocab: c.Vocab,
		AttentionHeads: c.Heads, QLoRARank: c.QLoRA, KVLoRARank: c.KVLoRA,
		QKNopeHeadDim: c.QKNope, QKRopeHeadDim: c.QKRope, VHeadDim: c.VHead,
		DenseIntermediate: c.Inter,
		RoutedExperts:     c.RoutedExperts, ActiveRoutedExperts: c.TopK, SharedExperts: c.SharedExperts,
		ExpertIntermediate: c.MoEInter, FirstDenseLayers: c.DenseLayers,
		RouterScoring: c.ScoringFunc, RouterTopKMethod: c.TopKMethod,
		ExpertGroups: c.Groups, TopKGroups: c.TopKGroups,
		NormalizeSelected: c.NormTopKProb, RoutedScalingFactor: c.RoutedScale,
		RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, RopeScaling: rope,
		SoftmaxScale: c.SoftmaxScale(),
	}
}

func cacheAccounting(c *Config) CacheAccounting {
	latent := c.KVLoRA + c.QKRope
	eager := c.Heads * (c.QKHead() + c.VHead)
	return CacheAccounting{
		DType:                        "BF16",
		LatentElementsPerTokenLayer:  latent,
		LatentBytesPerTokenLayer:     latent * cacheDTypeBytes,
		HFEagerElementsPerTokenLayer: eager,
		HFEagerBytesPerTokenLayer:    eager * cacheDTypeBytes,
		EagerOverLatentRatio:         float64(eager) / float64(latent),
		LatentReductionVsEager:       1 - float64(latent)/float64(eager),
		Components: map[string]int{
			"latent_content": c.KVLoRA,
			"rope_key":       c.QKRope,
			"expanded_key":   c.Heads * c.QKHead(),
			"expanded_value": c.Heads * c.VHead,
		},
	}
}

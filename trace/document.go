package trace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// SchemaVersion is the version of the trace documents' layout.
const SchemaVersion = 1

// encode writes v as indented JSON with a final newline, non-ASCII text
// as UTF-8 and <, >, & unescaped (token spellings hold them).
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PromptsJSON is prompts.json: the prompts with their token ids and
// tokens.
func (t *Tracer) PromptsJSON() ([]byte, error) { return encode(t.prompts) }

// LayerJSON is layers/NN.json: layer l's record, running the layer if
// needed.
func (t *Tracer) LayerJSON(ctx context.Context, l int) ([]byte, error) {
	r, err := t.Record(ctx, l)
	if err != nil {
		return nil, err
	}
	return encode(r)
}

// Document is trace.json, the whole trace as the seed writes it.
type Document struct {
	SchemaVersion    int             `json:"schema_version"`
	CapturedAtUTC    string          `json:"captured_at_utc"`
	EvidenceIdentity string          `json:"evidence_identity"`
	Boundary         Boundary        `json:"boundary"`
	Provenance       Provenance      `json:"provenance"`
	Environment      Environment     `json:"environment"`
	Configuration    Configuration   `json:"configuration"`
	Prompts          []Prompt        `json:"prompts"`
	Execution        Execution       `json:"execution"`
	CacheAccounting  CacheAccounting `json:"cache_accounting"`
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

// Environment is where the trace ran.
type Environment struct {
	Go           string  `json:"go"`
	OS           string  `json:"os"`
	Arch         string  `json:"arch"`
	CPUThreads   int     `json:"cpu_threads"`
	Backend      string  `json:"backend"`
	Device       string  `json:"device"`
	GPU          *string `json:"gpu"`
	MatmulKernel string  `json:"matmul_kernel"`
	ComputeDType string  `json:"compute_dtype"`
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
	Prompts       int            `json:"prompts"`
	ValidTokens   int            `json:"valid_tokens"`
	Batching      string         `json:"batching"`
	TimingMS      map[string]Num `json:"timing_ms"`
	InitialHidden HiddenStats    `json:"initial_hidden"`
	Layers        []*LayerRecord `json:"layers"`
	FinalHidden   HiddenStats    `json:"final_hidden"`
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

// TraceJSON is trace.json: every traceable layer run on every prompt.
func (t *Tracer) TraceJSON(ctx context.Context) ([]byte, error) {
	n := t.Layers()
	records := make([]*LayerRecord, n)
	for l := range n {
		r, err := t.Record(ctx, l)
		if err != nil {
			return nil, err
		}
		records[l] = r
	}
	if err := t.lock(ctx); err != nil {
		return nil, err
	}
	var err error
	if t.hidden[0] == nil { // no layer can run: still describe the input
		err = t.embed()
	}
	initial, final, embedTime := t.hidden[0], t.hidden[n], t.embedTime
	t.unlock()
	if err != nil {
		return nil, err
	}
	cfg := t.model.Config
	cat := t.model.Catalog()
	layers := make([]int, n)
	for i := range layers {
		layers[i] = i
	}
	var problems []string
	for l := range t.model.Checked() {
		problems = append(problems, t.model.Problems(l)...)
	}
	d := Document{
		SchemaVersion:    SchemaVersion,
		CapturedAtUTC:    time.Now().UTC().Format(time.RFC3339),
		EvidenceIdentity: "dsfs trace / checkpoint weights and tokenizer, per-layer forward in float32",
		Boundary: Boundary{
			Model:                      modelName(cfg),
			ExecutedLayers:             layers,
			TotalModelLayers:           cfg.Layers,
			Reference:                  "deepseek-ai/DeepSeek-V3 inference/model.py @9b4e978 semantics (absorbed MLA, float32); routing weights as the Hugging Face file of the model type",
			FullModelGeneration:        false,
			TrainingOrGlobalExpertLoad: false,
			ExpertSemanticsInferred:    false,
			PromptSample:               fmt.Sprintf("%d prompts; descriptive trace, not population estimate", len(t.prompts)),
			CacheNote:                  "the engine caches MLA's latent (kv_lora + rope per token); the eager K/V figures are what HF's eager attention would hold",
			Problems:                   problems,
		},
		Provenance: provenance(cat, t.model.Naming),
		Environment: Environment{
			Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			CPUThreads: runtime.GOMAXPROCS(0),
			Backend:    t.backend.Name(), Device: t.backend.Device(),
			MatmulKernel: simd.Kernel(), ComputeDType: "float32",
		},
		Configuration: configuration(cfg),
		Prompts:       t.prompts,
		Execution: Execution{
			Prompts:       len(t.prompts),
			ValidTokens:   t.tokens,
			Batching:      "every prompt's tokens in one batch for the projections and experts; attention per prompt, causal, positions from 0",
			TimingMS:      map[string]Num{"embedding": Num(embedTime.Seconds() * 1000)},
			InitialHidden: hiddenStats(initial, cfg.Hidden),
			Layers:        records,
			FinalHidden:   hiddenStats(final, cfg.Hidden),
		},
		CacheAccounting: cacheAccounting(cfg),
	}
	return encode(d)
}

func modelName(cfg *deepseek2.Config) string {
	s := cfg.ModelType
	if s == "" {
		s = "DeepSeek (ModelArgs config)"
	}
	if len(cfg.Architectures) > 0 {
		s += " / " + cfg.Architectures[0]
	}
	return s
}

func provenance(cat *checkpoint.Catalog, naming deepseek2.Naming) Provenance {
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
		if s, err := hashFile(f.Path); err == nil {
			p.SHA256[key] = s
		}
	}
	for _, t := range cat.Tensors {
		p.CheckpointTensorBytes += t.Size
	}
	return p
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func configuration(c *deepseek2.Config) Configuration {
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

func cacheAccounting(c *deepseek2.Config) CacheAccounting {
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

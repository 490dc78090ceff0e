package trace

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/v4"
)

// V4Reference is the code whose semantics a V4 trace follows.
const V4Reference = "deepseek-ai/DeepSeek-V4-Flash inference/model.py and kernel.py @60d8d70 (prefill, float32 activations)"

// V4Tracer runs prompts through a DeepSeek-V4 model's layers on demand,
// as Tracer does for V2/V3: it memoises the [tokens, hc, D] stream
// entering every computed layer, every layer's record, the full outputs
// of the most recent layers and the logits. It is safe for concurrent
// use; one forward runs at a time.
type V4Tracer struct {
	*v4Core[[]float32, v4.LayerOutput, V4LayerRecord, v4.Final]
	model *v4.Model
}

// NewV4 returns a tracer of prompts (already encoded) through m at
// precision p.
func NewV4(m *v4.Model, p v4.Precision, prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *V4Tracer {
	t := &V4Tracer{model: m}
	t.v4Core = newV4Core(m, m.Runnable(), v4Family[[]float32, v4.LayerOutput, V4LayerRecord, v4.Final]{
		config: m.Config,
		start:  m.Config.InitialStream,
		run: func(o *v4.LayerOutput) v4Run[[]float32] {
			return v4Run[[]float32]{layer: o.Layer, next: o.StreamOut, load: o.LoadTime, total: o.Time, experts: o.ExpertsRun,
				weightBytes: o.WeightBytes, streamOut: o.StreamOut, attnOut: o.AttnOut, ffnOut: o.FFNOut}
		},
		record: t.record,
		logits: func(f *v4.Final) []float32 { return f.Logits },
		extra:  t.activations,
		rows:   v4Rows,
	}, p, prompts, tok, log)
	return t
}

// V4LayerRecord is layers/NN.json of a V4 layer.
type V4LayerRecord struct {
	Layer         int    `json:"layer"`
	Attention     string `json:"attention"` // swa, csa or hca
	CompressRatio int    `json:"compress_ratio"`
	Role          string `json:"role"`
	HashRouted    bool   `json:"hash_routed"`
	LayerRun
	HC      map[string]HCStats `json:"hc"`
	Keys    []PromptKeys       `json:"keys_attended"`
	Indexer []PromptIndexer    `json:"indexer,omitempty"`
	Routing *RoutingTrace      `json:"routing"`
}

func (t *V4Tracer) record(in []float32, out *v4.LayerOutput) *V4LayerRecord {
	cfg := t.model.Config
	l, n := out.Layer, cfg.HCMult
	r := &V4LayerRecord{
		Layer: l, Attention: string(cfg.Kind(l)), CompressRatio: cfg.Ratio(l), Role: cfg.Role(l),
		HashRouted: cfg.HashRouted(l), LayerRun: t.layerRun(in, out),
		HC: map[string]HCStats{"attn": hcStats(out.HCAttn, n), "ffn": hcStats(out.HCFFN, n)},
	}
	for pi, sa := range out.Seqs {
		id := t.prompts[pi].ID
		r.Keys = append(r.Keys, promptKeys(id, sa.TopK, sa.K, min(len(t.seqs[pi]), cfg.Window), len(sa.Compressed)/cfg.HeadDim))
		if sa.IndexTopK != nil {
			r.Indexer = append(r.Indexer, promptIndexer(id, len(sa.IndexMargin), sa.IndexTopK, sa.IndexK, sa.IndexMargin, ascendingPicks))
		}
	}
	r.Routing = routingTrace(t.prompts, t.tok, cfg.RoutedExperts, routes(out.Routes))
	return r
}

// ascendingPicks returns the valid picks of one query, ascending, then
// its -1 entries.
func ascendingPicks(p []int32) []int32 {
	out := slices.Clone(p)
	slices.SortFunc(out, func(a, b int32) int {
		switch {
		case a == b:
			return 0
		case a < 0:
			return 1
		case b < 0:
			return -1
		case a < b:
			return -1
		}
		return 1
	})
	return out
}

// activations adds a V4 layer l's own tensors of a prompt of T tokens to
// Activations: compressed_kv [T/ratio, head_dim] (compressed layers,
// when the prompt fills a group) and indexer_topk [T, k] (CSA layers).
func (t *V4Tracer) activations(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64)) {
	cfg := t.model.Config
	if r := cfg.Ratio(l); r > 0 && T/int64(r) > 0 {
		add("compressed_kv", safetensors.F32, T/int64(r), int64(cfg.HeadDim))
		if cfg.Kind(l) == v4.CSA {
			add("indexer_topk", safetensors.I32, T, int64(min(cfg.IndexTopK, int(T)/r)))
		}
	}
}

// v4Rows is where a V4 layer activation lies in out.
func v4Rows(out *v4.LayerOutput, a V4Activation) (activationRows, error) {
	sa := out.Seqs[a.prompt]
	switch a.kind {
	case "stream_out":
		return activationRows{f32: out.StreamOut}, nil
	case "attn_out":
		return activationRows{f32: out.AttnOut}, nil
	case "ffn_out":
		return activationRows{f32: out.FFNOut}, nil
	case "compressed_kv":
		return activationRows{f32: sa.Compressed, own: true}, nil
	case "indexer_topk":
		ids := make([]int32, 0, len(sa.IndexTopK))
		for r := 0; r < len(sa.IndexTopK); r += sa.IndexK {
			ids = append(ids, ascendingPicks(sa.IndexTopK[r:r+sa.IndexK])...)
		}
		return activationRows{i32: ids, own: true}, nil
	case "topk_ids":
		return activationRows{i32: out.Routes.IDs}, nil
	case "topk_weights":
		return activationRows{f32: out.Routes.Weights}, nil
	}
	return activationRows{}, fmt.Errorf("%s: unknown activation", a.Name)
}

// V4Document is trace.json of a V4 trace.
type V4Document struct {
	SchemaVersion int         `json:"schema_version"`
	CapturedAtUTC string      `json:"captured_at_utc"`
	Model         string      `json:"model"`
	Reference     string      `json:"reference"`
	Precision     string      `json:"precision"`
	Environment   Environment `json:"environment"`
	// Configuration is the model's V4 settings as the engine read them.
	Configuration *v4.Config       `json:"configuration"`
	LayerRoles    []string         `json:"layer_roles"`
	Prompts       []Prompt         `json:"prompts"`
	Layers        []*V4LayerRecord `json:"layers"`
	Problems      []string         `json:"problems,omitempty"`
}

// TraceJSON is trace.json: every layer's record, running every layer.
func (t *V4Tracer) TraceJSON(ctx context.Context) ([]byte, error) {
	if err := t.runAll(ctx); err != nil {
		return nil, err
	}
	cfg := t.model.Config
	d := V4Document{
		SchemaVersion: SchemaVersion,
		CapturedAtUTC: capturedAt(),
		Model:         cfg.ModelType,
		Reference:     V4Reference,
		Precision:     string(t.precision),
		Environment:   t.environment("V4"),
		Configuration: cfg,
		Prompts:       t.prompts,
	}
	for l := range cfg.Layers {
		d.LayerRoles = append(d.LayerRoles, cfg.Role(l))
	}
	for l := range t.model.Checked() {
		for _, p := range t.model.Problems(l) {
			d.Problems = append(d.Problems, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	var err error
	if d.Layers, err = t.recorded(ctx); err != nil {
		return nil, err
	}
	return encode(d)
}

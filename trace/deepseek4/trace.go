// Package deepseek4 is trace/'s family of DeepSeek-V4 (V4-Flash): it
// opens a checkpoint's model with the V4 engine (package v4), runs its
// layers on the host engine or a GPU backend, and records each layer as
// DeepSeek's V4 code computes it: hyper-connection coefficients, window
// and compressed keys attended, indexer picks, hash-routed layers, routes,
// and the logits.
package deepseek4

import (
	"context"
	"fmt"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/internal/v4family"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

func init() { trace.Register(checkpoint.DeepSeekV4, Family{}) }

// Reference is the code whose semantics a V4 trace follows.
const Reference = "deepseek-ai/DeepSeek-V4-Flash inference/model.py and kernel.py @60d8d70 (prefill, float32 activations)"

// Family is trace/'s family of DeepSeek-V4.
type Family struct{}

// Open implements trace.Family: a configuration of the V4 family the
// engine lacks something for gives a *trace.Unsupported naming it.
func (Family) Open(cat *checkpoint.Catalog, _ *tokenizer.Tokenizer) (trace.Model, error) {
	if what, missing := v4.Missing(cat.ConfigBytes); missing != nil {
		return nil, &trace.Unsupported{What: what, Missing: missing}
	}
	inf, err := InferenceConfig(cat)
	if err != nil {
		return nil, err
	}
	m, err := v4.Open(cat, inf)
	if err != nil {
		return nil, err
	}
	return model{m}, nil
}

// InferenceConfig returns the checkpoint's inference/config.json,
// DeepSeek's ModelArgs, as the catalog read it, or nil when it has none.
// One the catalog could not read fails with the catalog's reason.
func InferenceConfig(cat *checkpoint.Catalog) ([]byte, error) {
	if b := cat.InferenceConfigBytes; b != nil {
		return b, nil
	}
	for _, p := range cat.Problems {
		if p.File == checkpoint.InferenceConfigName && p.Tensor == "" && strings.HasPrefix(p.Reason, "unreadable: ") {
			return nil, fmt.Errorf("%s: %s", p.File, p.Reason)
		}
	}
	return nil, nil
}

// model is a V4 model as trace.Model.
type model struct{ m *v4.Model }

func (t model) Vocab() int  { return t.m.Config.Vocab }
func (t model) Layers() int { return t.m.Config.Layers }

func (t model) Problems() []string {
	var out []string
	for l := range t.m.Checked() {
		for _, p := range t.m.Problems(l) {
			out = append(out, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	for _, p := range t.m.HeadProblems() {
		out = append(out, "head: "+p)
	}
	return out
}

// core is the tracer of a V4 model.
type core = trace.Core[[]float32, v4.LayerOutput, LayerRecord, v4.Final]

// Trace implements trace.Model: the layers run at opt.Precision on
// opt.Backend (the host engine for the CPU backend or none).
func (t model) Trace(prompts []trace.Prompt, opt trace.Options) (trace.Tracer, error) {
	p, err := v4family.Precision(opt.Precision)
	if err != nil {
		return nil, err
	}
	t.m.SetBackend(v4family.Engine(opt.Backend))
	tr := &tracer{m: t.m, p: p, prompts: prompts, tok: opt.Tokenizer}
	for _, q := range prompts {
		tr.seqs = append(tr.seqs, q.TokenIDs)
	}
	cfg := t.m.Config
	return trace.NewCore(tr, trace.Spec[[]float32, v4.LayerOutput, LayerRecord, v4.Final]{
		Layers: cfg.Layers, Runnable: t.m.Runnable(), Backend: v4family.Name(t.m.Backend()),
		Start: cfg.InitialStream, Started: opt.Started,
		Run: func(o *v4.LayerOutput) trace.Run[[]float32] {
			return trace.Run[[]float32]{Layer: o.Layer, Next: o.StreamOut, Load: o.LoadTime, Total: o.Time, Note: []any{"precision", string(p)}}
		},
		Record:  tr.record,
		Tensors: tr.tensors,
		Rows:    rows,
		Logits:  func(f *v4.Final) []float32 { return f.Logits },
		Vocab:   cfg.Vocab,
		Report:  tr.report,
		Experts: func(o *v4.LayerOutput) (in, mid []float32) { return o.Experts.In, o.Experts.Mid },
		Routing: func(r *LayerRecord) *trace.RoutingTrace { return r.Routing },
		Cost: func(lens []int, tensors int) trace.Cost {
			return v4family.Cost(cfg, t.m.Runnable(), tensors, lens)
		},
	}, prompts, opt.Tokenizer, opt.Log), nil
}

// tracer is what the core runs a V4 model through.
type tracer struct {
	m       *v4.Model
	p       v4.Precision
	prompts []trace.Prompt
	tok     *tokenizer.Tokenizer
	seqs    [][]int
}

func (t *tracer) EmbedRows(ids []int) ([]float32, error) { return t.m.EmbedRows(ids) }

func (t *tracer) Forward(ctx context.Context, l int, in []float32) (*v4.LayerOutput, error) {
	return t.m.Forward(ctx, l, in, t.seqs, t.p)
}

func (t *tracer) Logits(ctx context.Context, in []float32) (*v4.Final, error) {
	return t.m.Logits(ctx, in)
}

func (t *tracer) LayerTensors(l int) (int, int64, int64) { return t.m.LayerTensors(l) }

// layerOf is what the record reads of a forward.
func layerOf(o *v4.LayerOutput) v4family.Layer {
	return v4family.Layer{Layer: o.Layer, Load: o.LoadTime, Total: o.Time, Experts: o.ExpertsRun,
		WeightBytes: o.WeightBytes, StreamOut: o.StreamOut, AttnOut: o.AttnOut, FFNOut: o.FFNOut}
}

// LayerRecord is layers/NN.json of a V4 layer.
type LayerRecord struct {
	Layer         int    `json:"layer"`
	Attention     string `json:"attention"` // swa, csa or hca
	CompressRatio int    `json:"compress_ratio"`
	Role          string `json:"role"`
	HashRouted    bool   `json:"hash_routed"`
	v4family.LayerRun
	HC      map[string]v4family.HCStats `json:"hc"`
	Keys    []v4family.PromptKeys       `json:"keys_attended"`
	Indexer []v4family.PromptIndexer    `json:"indexer,omitempty"`
	Routing *trace.RoutingTrace         `json:"routing"`
}

func (t *tracer) record(in []float32, out *v4.LayerOutput) *LayerRecord {
	cfg := t.m.Config
	l, n := out.Layer, cfg.HCMult
	r := &LayerRecord{
		Layer: l, Attention: string(cfg.Kind(l)), CompressRatio: cfg.Ratio(l), Role: cfg.Role(l),
		HashRouted: cfg.HashRouted(l), LayerRun: v4family.RunOf(t.p, cfg.Hidden, in, layerOf(out), t.m.LayerTensors),
		HC: map[string]v4family.HCStats{"attn": v4family.HCStatsOf(out.HCAttn, n), "ffn": v4family.HCStatsOf(out.HCFFN, n)},
	}
	for pi, sa := range out.Seqs {
		id := t.prompts[pi].ID
		r.Keys = append(r.Keys, v4family.PromptKeysOf(id, sa.TopK, sa.K, min(len(t.prompts[pi].TokenIDs), cfg.Window), len(sa.Compressed)/cfg.HeadDim))
		if sa.IndexTopK != nil {
			r.Indexer = append(r.Indexer, v4family.PromptIndexerOf(id, len(sa.IndexMargin), sa.IndexTopK, sa.IndexK, sa.IndexMargin, v4family.AscendingPicks))
		}
	}
	r.Routing = trace.Routing(t.prompts, t.tok, cfg.RoutedExperts, v4family.Routes(out.Routes))
	return r
}

// tensors lists a prompt of T tokens' tensors of layer l: the V4
// family's (v4family.Tensors) with the layer's own, compressed_kv [T/ratio, head_dim] (compressed layers,
// when the prompt fills a group) and indexer_topk [T, k] (CSA layers).
func (t *tracer) tensors(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64)) {
	cfg := t.m.Config
	v4family.Tensors(cfg, T, add, func() {
		if r := cfg.Ratio(l); r > 0 && T/int64(r) > 0 {
			add("compressed_kv", safetensors.F32, T/int64(r), int64(cfg.HeadDim))
			if cfg.Kind(l) == v4.CSA {
				add("indexer_topk", safetensors.I32, T, int64(min(cfg.IndexTopK, int(T)/r)))
			}
		}
	})
}

// rows is where a V4 layer activation lies in out.
func rows(out *v4.LayerOutput, a trace.Activation) (trace.ActivationRows, error) {
	sa := out.Seqs[a.Prompt]
	switch a.Kind {
	case "stream_out":
		return trace.ActivationRows{F32: out.StreamOut}, nil
	case "attn_out":
		return trace.ActivationRows{F32: out.AttnOut}, nil
	case "ffn_out":
		return trace.ActivationRows{F32: out.FFNOut}, nil
	case "compressed_kv":
		return trace.ActivationRows{F32: sa.Compressed, Own: true}, nil
	case "indexer_topk":
		ids := make([]int32, 0, len(sa.IndexTopK))
		for r := 0; r < len(sa.IndexTopK); r += sa.IndexK {
			ids = append(ids, v4family.AscendingPicks(sa.IndexTopK[r:r+sa.IndexK])...)
		}
		return trace.ActivationRows{I32: ids, Own: true}, nil
	case "topk_ids":
		return trace.ActivationRows{I32: out.Routes.IDs}, nil
	case "topk_weights":
		return trace.ActivationRows{F32: out.Routes.Weights}, nil
	}
	return trace.ActivationRows{}, fmt.Errorf("%s: unknown activation", a.Name)
}

// Report is trace.json, the report of a whole V4 trace.
type Report struct {
	SchemaVersion int               `json:"schema_version"`
	CapturedAtUTC string            `json:"captured_at_utc"`
	Model         string            `json:"model"`
	Reference     string            `json:"reference"`
	Precision     string            `json:"precision"`
	Environment   trace.Environment `json:"environment"`
	// Configuration is the model's V4 settings as the engine read them.
	Configuration *v4.Config     `json:"configuration"`
	LayerRoles    []string       `json:"layer_roles"`
	Prompts       []trace.Prompt `json:"prompts"`
	Layers        []*LayerRecord `json:"layers"`
	Problems      []string       `json:"problems,omitempty"`
}

// report is trace.json: every layer's record, running every layer.
func (t *tracer) report(ctx context.Context, c *core) (any, error) {
	if err := c.RunAll(ctx); err != nil {
		return nil, err
	}
	cfg := t.m.Config
	d := Report{
		SchemaVersion: trace.SchemaVersion,
		CapturedAtUTC: trace.CapturedAt(),
		Model:         cfg.ModelType,
		Reference:     Reference,
		Precision:     string(t.p),
		Environment:   v4family.Environment(t.m.Backend(), "V4"),
		Configuration: cfg,
		Prompts:       t.prompts,
	}
	for l := range cfg.Layers {
		d.LayerRoles = append(d.LayerRoles, cfg.Role(l))
	}
	for l := range t.m.Checked() {
		for _, p := range t.m.Problems(l) {
			d.Problems = append(d.Problems, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	var err error
	if d.Layers, err = c.Records(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

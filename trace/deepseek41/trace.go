// Package deepseek41 is trace/'s family of DeepSeek-V4.1 (V4.1-Flash): it
// opens a checkpoint's model with the V4 engine's V4.1 model (package v4:
// CSA2 attention roles, Engram memory hashed through the checkpoint's
// tokenizer), runs its layers on the host engine or a GPU backend, and
// records each layer as DeepSeek's V4.1 code computes it: the carried
// pre_mix, the roles, keys attended, indexer picks, candidate blocks,
// Engram hash ids and gates, routes, and the logits. DSpark stages
// (mtp.*) are listed, not run.
package deepseek41

import (
	"context"
	"fmt"
	"math"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/deepseek4"
	"github.com/dsfs/dsfs/trace/internal/v4family"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

func init() { trace.Register(checkpoint.DeepSeekV41, Family{}) }

// Reference is the code whose semantics a V4.1 trace follows.
const Reference = "deepseek-ai/DeepSeek-V4.1-Flash inference/model.py and engram.py @dba1be0a (prefill, float32 activations)"

// Family is trace/'s family of DeepSeek-V4.1.
type Family struct{}

// Open implements trace.Family: tok, the checkpoint's tokenizer, builds
// the Engram token map (Engram layers cannot run without it).
func (Family) Open(cat *checkpoint.Catalog, tok *tokenizer.Tokenizer) (trace.Model, error) {
	inf, err := deepseek4.InferenceConfig(cat)
	if err != nil {
		return nil, err
	}
	m, err := v4.Open41(cat, inf, tok)
	if err != nil {
		return nil, err
	}
	return model{m}, nil
}

// model is a V4.1 model as trace.Model.
type model struct{ m *v4.Model41 }

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

// core is the tracer of a V4.1 model.
type core = trace.Core[*v4.State41, v4.LayerOutput41, LayerRecord, v4.Final41]

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
	return trace.NewCore(tr, trace.Spec[*v4.State41, v4.LayerOutput41, LayerRecord, v4.Final41]{
		Layers: cfg.Layers, Runnable: t.m.Runnable(), Backend: v4family.Name(t.m.Backend()),
		Start: func(e []float32) *v4.State41 { return cfg.InitialState41(e, len(prompts)) }, Started: opt.Started,
		Run: func(o *v4.LayerOutput41) trace.Run[*v4.State41] {
			return trace.Run[*v4.State41]{Layer: o.Layer, Next: o.Out, Load: o.LoadTime, Total: o.Time, Note: []any{"precision", string(p)}}
		},
		Record:  tr.record,
		Tensors: tr.tensors,
		Rows:    rows,
		Logits:  func(f *v4.Final41) []float32 { return f.Logits },
		Vocab:   cfg.Vocab,
		Report:  tr.report,
		Experts: func(o *v4.LayerOutput41) (in, mid []float32) { return o.Experts.In, o.Experts.Mid },
		Routing: func(r *LayerRecord) *trace.RoutingTrace { return r.Routing },
		Cost: func(lens []int, tensors int) trace.Cost {
			return v4family.Cost(cfg.Config, t.m.Runnable(), tensors, lens)
		},
	}, prompts, opt.Tokenizer, opt.Log), nil
}

// tracer is what the core runs a V4.1 model through.
type tracer struct {
	m       *v4.Model41
	p       v4.Precision
	prompts []trace.Prompt
	tok     *tokenizer.Tokenizer
	seqs    [][]int
}

func (t *tracer) EmbedRows(ids []int) ([]float32, error) { return t.m.EmbedRows(ids) }

func (t *tracer) Forward(ctx context.Context, l int, in *v4.State41) (*v4.LayerOutput41, error) {
	return t.m.Forward(ctx, l, in, t.seqs, t.p)
}

func (t *tracer) Logits(ctx context.Context, in *v4.State41) (*v4.Final41, error) {
	return t.m.Logits(ctx, in)
}

func (t *tracer) LayerTensors(l int) (int, int64, int64) { return t.m.LayerTensors(l) }

// layerOf is what the record reads of a forward.
func layerOf(o *v4.LayerOutput41) v4family.Layer {
	return v4family.Layer{Layer: o.Layer, Load: o.LoadTime, Total: o.Time, Experts: o.ExpertsRun,
		WeightBytes: o.WeightBytes, StreamOut: o.StreamOut, AttnOut: o.AttnOut, FFNOut: o.FFNOut}
}

// LayerRecord is layers/NN.json of a V4.1 layer.
type LayerRecord struct {
	Layer       int       `json:"layer"`
	Role        v4.Role41 `json:"role"`
	Description string    `json:"description"`
	v4family.LayerRun
	// PreMixIn collapses the attention input (the previous layer's FFN
	// pre; one-hot for layer 0), PreMixOut is carried to the next layer.
	PreMixIn   trace.Spread                `json:"pre_mix_in"`
	PreMixOut  trace.Spread                `json:"pre_mix_out"`
	HC         map[string]v4family.HCStats `json:"hc"`
	Engram     []PromptEngram              `json:"engram,omitempty"`
	Keys       []v4family.PromptKeys       `json:"keys_attended"`
	Indexer    []v4family.PromptIndexer    `json:"indexer,omitempty"`
	Candidates []PromptCandidates          `json:"candidates,omitempty"`
	Routing    *trace.RoutingTrace         `json:"routing"`
}

// PromptEngram is one prompt's Engram lookup: per token the table rows
// its n-grams hash to (orders 2.., heads within) and the gate per stream.
type PromptEngram struct {
	ID       string        `json:"id"`
	RowsRead int           `json:"rows_read"`
	Gate     trace.Spread  `json:"gate"`
	Tokens   []EngramToken `json:"tokens"`
}

// EngramToken is one position's hash ids and gates.
type EngramToken struct {
	Position int       `json:"position"`
	HashIDs  []int32   `json:"hash_ids"`
	Gate     []float32 `json:"gate"`
}

// PromptCandidates is one prompt's candidate pool (the candidate
// source): per query the candidate blocks kept and the margin between
// the last kept and the first dropped block score.
type PromptCandidates struct {
	ID     string            `json:"id"`
	Margin trace.Spread      `json:"margin"`
	Tokens []CandidateBlocks `json:"tokens"`
}

// CandidateBlocks is one query's kept blocks, ascending.
type CandidateBlocks struct {
	Position int       `json:"position"`
	Blocks   []int     `json:"blocks"`
	Margin   trace.Num `json:"margin"`
}

func (t *tracer) record(in *v4.State41, out *v4.LayerOutput41) *LayerRecord {
	cfg := t.m.Config
	l, n := out.Layer, cfg.HCMult
	r := &LayerRecord{
		Layer: l, Role: out.Role, Description: out.Role.Describe(), LayerRun: v4family.RunOf(t.p, cfg.Hidden, in.Stream, layerOf(out), t.m.LayerTensors),
		PreMixIn: trace.SpreadOf(trace.Float64s(out.PreMixIn), true), PreMixOut: trace.SpreadOf(trace.Float64s(out.PreMixOut), true),
		HC: map[string]v4family.HCStats{"attn": v4family.HCStatsOf(out.HCAttn, n), "ffn": v4family.HCStatsOf(out.HCFFN, n)},
	}
	row := 0
	for pi, sa := range out.Seqs {
		T := len(t.seqs[pi])
		if e := out.Engram; e != nil {
			pe := PromptEngram{ID: t.prompts[pi].ID, Gate: trace.SpreadOf(trace.Float64s(e.Gate[row*n:(row+T)*n]), true)}
			rows := map[int32]bool{}
			for p := range T {
				ids := e.HashIDs[(row+p)*e.Cols : (row+p+1)*e.Cols]
				for _, id := range ids {
					rows[id] = true
				}
				pe.Tokens = append(pe.Tokens, EngramToken{Position: p, HashIDs: ids, Gate: e.Gate[(row+p)*n : (row+p+1)*n]})
			}
			pe.RowsRead = len(rows)
			r.Engram = append(r.Engram, pe)
		}
		id := t.prompts[pi].ID
		r.Keys = append(r.Keys, v4family.PromptKeysOf(id, sa.TopK, sa.K, min(T, cfg.Window), len(sa.Compressed)/cfg.HeadDim))
		if sa.IndexTopK != nil {
			// V4.1 picks are in position order already.
			r.Indexer = append(r.Indexer, v4family.PromptIndexerOf(id, T, sa.IndexTopK, sa.IndexK, sa.IndexMargin, func(p []int32) []int32 { return p }))
		}
		if sa.BlockScores != nil {
			pc := PromptCandidates{ID: t.prompts[pi].ID}
			nc := len(sa.Candidates) / max(T, 1)
			var margins []float64
			for pos := range T {
				var blocks []int
				for b := range sa.NBlocks {
					j := b * cfg.CandidateBlockSize
					if j < nc && sa.Candidates[pos*nc+j] {
						blocks = append(blocks, b)
					}
				}
				m := float64(sa.CandMargin[pos])
				if !math.IsInf(m, 0) {
					margins = append(margins, m)
				}
				pc.Tokens = append(pc.Tokens, CandidateBlocks{Position: pos, Blocks: blocks, Margin: trace.Num(m)})
			}
			pc.Margin = trace.SpreadOf(margins, true)
			r.Candidates = append(r.Candidates, pc)
		}
		row += T
	}
	r.Routing = trace.Routing(t.prompts, t.tok, cfg.RoutedExperts, v4family.Routes(out.Routes))
	return r
}

// tensors lists a prompt of T tokens' tensors of layer l: the V4
// family's (v4family.Tensors) with the layer's own, pre_mix [T, hc] (carried to the next layer),
// compressed_kv [T/ratio, head_dim] (the shared compressed KV the layer
// attends over), indexer_topk [T, k] (index sources), candidates U8
// [T, T/ratio] (the candidate mask, from the candidate source on),
// engram_ids I32 [T, orders x heads] and engram_gate [T, hc] (Engram
// layers).
func (t *tracer) tensors(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64)) {
	cfg := t.m.Config
	role := cfg.Roles[l]
	v4family.Tensors(cfg.Config, T, add, func() {
		add("pre_mix", safetensors.F32, T, int64(cfg.HCMult))
		if r := int64(role.Ratio); r > 0 && T/r > 0 {
			add("compressed_kv", safetensors.F32, T/r, int64(cfg.HeadDim))
			if role.IndexSource {
				add("indexer_topk", safetensors.I32, T, min(int64(cfg.IndexTopK), T/r))
			}
			if cfg.CandidateSource >= 0 && l >= cfg.CandidateSource {
				add("candidates", safetensors.U8, T, T/r)
			}
		}
		if role.Engram {
			add("engram_ids", safetensors.I32, T, int64((cfg.EngramMaxNgram-1)*cfg.EngramHeads))
			add("engram_gate", safetensors.F32, T, int64(cfg.HCMult))
		}
	})
}

// rows is where a V4.1 layer activation lies in out.
func rows(out *v4.LayerOutput41, a trace.Activation) (trace.ActivationRows, error) {
	sa := out.Seqs[a.Prompt]
	switch a.Kind {
	case "stream_out":
		return trace.ActivationRows{F32: out.StreamOut}, nil
	case "attn_out":
		return trace.ActivationRows{F32: out.AttnOut}, nil
	case "ffn_out":
		return trace.ActivationRows{F32: out.FFNOut}, nil
	case "pre_mix":
		return trace.ActivationRows{F32: out.PreMixOut}, nil
	case "compressed_kv":
		return trace.ActivationRows{F32: sa.Compressed, Own: true}, nil
	case "indexer_topk":
		return trace.ActivationRows{I32: sa.IndexTopK, Own: true}, nil
	case "candidates":
		mask := out.Out.Shared[a.Prompt].Candidates
		if w := int(a.RowBytes()); len(mask) != a.Rows()*w {
			return trace.ActivationRows{}, fmt.Errorf("%s: the candidate mask holds %d entries, not %d x %d", a.Name, len(mask), a.Rows(), w)
		}
		return trace.ActivationRows{Mask: mask, Own: true}, nil
	case "engram_ids":
		return trace.ActivationRows{I32: out.Engram.HashIDs}, nil
	case "engram_gate":
		return trace.ActivationRows{F32: out.Engram.Gate}, nil
	case "topk_ids":
		return trace.ActivationRows{I32: out.Routes.IDs}, nil
	case "topk_weights":
		return trace.ActivationRows{F32: out.Routes.Weights}, nil
	}
	return trace.ActivationRows{}, fmt.Errorf("%s: unknown activation", a.Name)
}

// Report is trace.json, the report of a whole V4.1 trace.
type Report struct {
	SchemaVersion int               `json:"schema_version"`
	CapturedAtUTC string            `json:"captured_at_utc"`
	Model         string            `json:"model"`
	Reference     string            `json:"reference"`
	Precision     string            `json:"precision"`
	Environment   trace.Environment `json:"environment"`
	// Configuration is the model's settings as the engine read them,
	// with every layer's derived CSA2 role.
	Configuration *v4.Config41 `json:"configuration"`
	LayerRoles    []string     `json:"layer_roles"`
	// Engram is the hashing layout built from tokenizer.json (primes,
	// offsets and multipliers per Engram layer).
	Engram *v4.EngramHash `json:"engram,omitempty"`
	// DSparkStages are the draft stages (mtp.N) in the checkpoint: listed,
	// not run.
	DSparkStages []string       `json:"dspark_stages_not_run,omitempty"`
	Prompts      []trace.Prompt `json:"prompts"`
	Layers       []*LayerRecord `json:"layers"`
	Problems     []string       `json:"problems,omitempty"`
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
		Environment:   v4family.Environment(t.m.Backend(), "V4.1"),
		Configuration: cfg,
		Engram:        t.m.Engram,
		DSparkStages:  t.m.DSparkStages(),
		Prompts:       t.prompts,
	}
	for l := range cfg.Layers {
		d.LayerRoles = append(d.LayerRoles, cfg.Role(l))
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

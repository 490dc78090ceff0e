package trace

import (
	"context"
	"fmt"
	"log/slog"
	"math"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/v4"
)

// V41Reference is the code whose semantics a V4.1 trace follows.
const V41Reference = "deepseek-ai/DeepSeek-V4.1-Flash inference/model.py and engram.py @dba1be0a (prefill, float32 activations)"

// V41Tracer runs prompts through a DeepSeek-V4.1 model's layers on
// demand. It memoises the whole state entering every computed layer (the
// [tokens, hc, D] streams, the carried pre_mix and the CSA2 shared
// attention state), so reading layer N runs only the layers before it
// not yet run. It is safe for concurrent use; one forward runs at a time.
type V41Tracer struct {
	*v4Core[*v4.State41, v4.LayerOutput41, V41LayerRecord, v4.Final41]
	model *v4.Model41
}

// NewV41 returns a tracer of prompts (already encoded) through m at
// precision p.
func NewV41(m *v4.Model41, p v4.Precision, prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *V41Tracer {
	t := &V41Tracer{model: m}
	t.v4Core = newV4Core(m, m.Runnable(), v4Family[*v4.State41, v4.LayerOutput41, V41LayerRecord, v4.Final41]{
		config: m.Config.Config,
		start:  func(e []float32) *v4.State41 { return m.Config.InitialState41(e, len(prompts)) },
		run: func(o *v4.LayerOutput41) v4Run[*v4.State41] {
			return v4Run[*v4.State41]{layer: o.Layer, next: o.Out, load: o.LoadTime, total: o.Time, experts: o.ExpertsRun,
				weightBytes: o.WeightBytes, streamOut: o.StreamOut, attnOut: o.AttnOut, ffnOut: o.FFNOut}
		},
		record: t.record,
		logits: func(f *v4.Final41) []float32 { return f.Logits },
		extra:  t.activations,
		rows:   v41Rows,
	}, p, prompts, tok, log)
	return t
}

// V41LayerRecord is layers/NN.json of a V4.1 layer.
type V41LayerRecord struct {
	Layer       int       `json:"layer"`
	Role        v4.Role41 `json:"role"`
	Description string    `json:"description"`
	LayerRun
	// PreMixIn collapses the attention input (the previous layer's FFN
	// pre; one-hot for layer 0), PreMixOut is carried to the next layer.
	PreMixIn   Spread             `json:"pre_mix_in"`
	PreMixOut  Spread             `json:"pre_mix_out"`
	HC         map[string]HCStats `json:"hc"`
	Engram     []PromptEngram     `json:"engram,omitempty"`
	Keys       []PromptKeys       `json:"keys_attended"`
	Indexer    []PromptIndexer    `json:"indexer,omitempty"`
	Candidates []PromptCandidates `json:"candidates,omitempty"`
	Routing    *RoutingTrace      `json:"routing"`
}

// PromptEngram is one prompt's Engram lookup: per token the table rows
// its n-grams hash to (orders 2.., heads within) and the gate per stream.
type PromptEngram struct {
	ID       string        `json:"id"`
	RowsRead int           `json:"rows_read"`
	Gate     Spread        `json:"gate"`
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
	Margin Spread            `json:"margin"`
	Tokens []CandidateBlocks `json:"tokens"`
}

// CandidateBlocks is one query's kept blocks, ascending.
type CandidateBlocks struct {
	Position int   `json:"position"`
	Blocks   []int `json:"blocks"`
	Margin   Num   `json:"margin"`
}

func (t *V41Tracer) record(in *v4.State41, out *v4.LayerOutput41) *V41LayerRecord {
	cfg := t.model.Config
	l, n := out.Layer, cfg.HCMult
	r := &V41LayerRecord{
		Layer: l, Role: out.Role, Description: out.Role.Describe(), LayerRun: t.layerRun(in.Stream, out),
		PreMixIn: spread(floats64(out.PreMixIn), true), PreMixOut: spread(floats64(out.PreMixOut), true),
		HC: map[string]HCStats{"attn": hcStats(out.HCAttn, n), "ffn": hcStats(out.HCFFN, n)},
	}
	row := 0
	for pi, sa := range out.Seqs {
		T := len(t.seqs[pi])
		if e := out.Engram; e != nil {
			pe := PromptEngram{ID: t.prompts[pi].ID, Gate: spread(floats64(e.Gate[row*n:(row+T)*n]), true)}
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
		r.Keys = append(r.Keys, promptKeys(id, sa.TopK, sa.K, min(T, cfg.Window), len(sa.Compressed)/cfg.HeadDim))
		if sa.IndexTopK != nil {
			// V4.1 picks are in position order already.
			r.Indexer = append(r.Indexer, promptIndexer(id, T, sa.IndexTopK, sa.IndexK, sa.IndexMargin, func(p []int32) []int32 { return p }))
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
				pc.Tokens = append(pc.Tokens, CandidateBlocks{Position: pos, Blocks: blocks, Margin: Num(m)})
			}
			pc.Margin = spread(margins, true)
			r.Candidates = append(r.Candidates, pc)
		}
		row += T
	}
	r.Routing = routingTrace(t.prompts, t.tok, cfg.RoutedExperts, routes(out.Routes))
	return r
}

// activations adds a V4.1 layer l's own tensors of a prompt of T tokens
// to Activations: pre_mix [T, hc] (carried to the next layer),
// compressed_kv [T/ratio, head_dim] (the shared compressed KV the layer
// attends over), indexer_topk [T, k] (index sources), candidates U8
// [T, T/ratio] (the candidate mask, from the candidate source on),
// engram_ids I32 [T, orders x heads] and engram_gate [T, hc] (Engram
// layers).
func (t *V41Tracer) activations(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64)) {
	cfg := t.model.Config
	role := cfg.Roles[l]
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
}

// v41Rows is where a V4.1 layer activation lies in out.
func v41Rows(out *v4.LayerOutput41, a V4Activation) (activationRows, error) {
	sa := out.Seqs[a.prompt]
	switch a.kind {
	case "stream_out":
		return activationRows{f32: out.StreamOut}, nil
	case "attn_out":
		return activationRows{f32: out.AttnOut}, nil
	case "ffn_out":
		return activationRows{f32: out.FFNOut}, nil
	case "pre_mix":
		return activationRows{f32: out.PreMixOut}, nil
	case "compressed_kv":
		return activationRows{f32: sa.Compressed, own: true}, nil
	case "indexer_topk":
		return activationRows{i32: sa.IndexTopK, own: true}, nil
	case "candidates":
		mask := out.Out.Shared[a.prompt].Candidates
		if w := int(a.RowBytes()); len(mask) != a.Rows()*w {
			return activationRows{}, fmt.Errorf("%s: the candidate mask holds %d entries, not %d x %d", a.Name, len(mask), a.Rows(), w)
		}
		return activationRows{mask: mask, own: true}, nil
	case "engram_ids":
		return activationRows{i32: out.Engram.HashIDs}, nil
	case "engram_gate":
		return activationRows{f32: out.Engram.Gate}, nil
	case "topk_ids":
		return activationRows{i32: out.Routes.IDs}, nil
	case "topk_weights":
		return activationRows{f32: out.Routes.Weights}, nil
	}
	return activationRows{}, fmt.Errorf("%s: unknown activation", a.Name)
}

// V41Document is trace.json of a V4.1 trace.
type V41Document struct {
	SchemaVersion int         `json:"schema_version"`
	CapturedAtUTC string      `json:"captured_at_utc"`
	Model         string      `json:"model"`
	Reference     string      `json:"reference"`
	Precision     string      `json:"precision"`
	Environment   Environment `json:"environment"`
	// Configuration is the model's settings as the engine read them,
	// with every layer's derived CSA2 role.
	Configuration *v4.Config41 `json:"configuration"`
	LayerRoles    []string     `json:"layer_roles"`
	// Engram is the hashing layout built from tokenizer.json (primes,
	// offsets and multipliers per Engram layer).
	Engram *v4.EngramHash `json:"engram,omitempty"`
	// DSparkStages are the draft stages (mtp.N) in the checkpoint: listed,
	// not run.
	DSparkStages []string          `json:"dspark_stages_not_run,omitempty"`
	Prompts      []Prompt          `json:"prompts"`
	Layers       []*V41LayerRecord `json:"layers"`
	Problems     []string          `json:"problems,omitempty"`
}

// TraceJSON is trace.json: every layer's record, running every layer.
func (t *V41Tracer) TraceJSON(ctx context.Context) ([]byte, error) {
	if err := t.runAll(ctx); err != nil {
		return nil, err
	}
	cfg := t.model.Config
	d := V41Document{
		SchemaVersion: SchemaVersion,
		CapturedAtUTC: capturedAt(),
		Model:         cfg.ModelType,
		Reference:     V41Reference,
		Precision:     string(t.precision),
		Environment:   t.environment("V4.1"),
		Configuration: cfg,
		Engram:        t.model.Engram,
		DSparkStages:  t.model.DSparkStages(),
		Prompts:       t.prompts,
	}
	for l := range cfg.Layers {
		d.LayerRoles = append(d.LayerRoles, cfg.Role(l))
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

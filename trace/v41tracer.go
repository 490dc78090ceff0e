package trace

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/model"
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
	model     *v4.Model41
	precision v4.Precision
	prompts   []Prompt
	tok       *tokenizer.Tokenizer
	log       *slog.Logger
	seqs      [][]int
	tokens    int

	sem     chan struct{}
	states  []*v4.State41 // states[l] enters layer l; states[Layers] leaves the last
	records []*V41LayerRecord
	recent  []*v4.LayerOutput41
	final   *v4.Final41

	forwards atomic.Int64
}

// NewV41 returns a tracer of prompts (already encoded) through m at
// precision p.
func NewV41(m *v4.Model41, p v4.Precision, prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *V41Tracer {
	t := &V41Tracer{model: m, precision: p, prompts: prompts, tok: tok, log: log,
		sem:     make(chan struct{}, 1),
		states:  make([]*v4.State41, m.Runnable()+1),
		records: make([]*V41LayerRecord, m.Runnable()),
	}
	for _, p := range prompts {
		t.seqs = append(t.seqs, p.TokenIDs)
		t.tokens += len(p.TokenIDs)
	}
	return t
}

// Layers is the number of layers the tracer can run.
func (t *V41Tracer) Layers() int { return len(t.records) }

// Forwards is the number of layer forwards run so far.
func (t *V41Tracer) Forwards() int64 { return t.forwards.Load() }

// PromptsJSON is prompts.json.
func (t *V41Tracer) PromptsJSON() ([]byte, error) { return encode(t.prompts) }

func (t *V41Tracer) lock(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *V41Tracer) unlock() { <-t.sem }

// Layer returns layer l's outputs and record, running whatever layers up
// to l have not run yet.
func (t *V41Tracer) Layer(ctx context.Context, l int) (*v4.LayerOutput41, *V41LayerRecord, error) {
	if l < 0 || l >= t.Layers() {
		return nil, nil, fmt.Errorf("layer %d is not traceable (layers 0-%d are)", l, t.Layers()-1)
	}
	if err := t.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer t.unlock()
	return t.layer(ctx, l)
}

func (t *V41Tracer) layer(ctx context.Context, l int) (*v4.LayerOutput41, *V41LayerRecord, error) {
	for _, o := range t.recent {
		if o.Layer == l {
			return o, t.records[l], nil
		}
	}
	from := l
	for t.states[from] == nil && from > 0 {
		from--
	}
	if t.states[from] == nil {
		var ids []int
		for _, s := range t.seqs {
			ids = append(ids, s...)
		}
		e, err := t.model.EmbedRows(ids)
		if err != nil {
			return nil, nil, err
		}
		t.states[0] = t.model.Config.InitialState41(e, len(t.seqs))
	}
	var out *v4.LayerOutput41
	for j := from; j <= l; j++ {
		in := t.states[j]
		var err error
		if out, err = t.model.Forward(ctx, j, in, t.seqs, t.precision); err != nil {
			return nil, nil, err
		}
		t.forwards.Add(1)
		if t.log != nil {
			t.log.Info("trace: layer forward", "layer", j, "tokens", t.tokens, "backend", "cpu",
				"precision", string(t.precision), "ms", out.Time.Milliseconds(), "load_ms", out.LoadTime.Milliseconds())
		}
		t.states[j+1] = out.Out
		if t.records[j] == nil {
			t.records[j] = t.record(in, out)
		}
		t.recent = append(t.recent, out)
		if len(t.recent) > recentOutputs {
			t.recent = t.recent[1:]
		}
	}
	return out, t.records[l], nil
}

// Final returns the final collapse, norm and logits of every position,
// running every layer first.
func (t *V41Tracer) Final(ctx context.Context) (*v4.Final41, error) {
	if t.Layers() < t.model.Config.Layers {
		return nil, fmt.Errorf("the logits need every layer; layer %d cannot run", t.Layers())
	}
	if err := t.lock(ctx); err != nil {
		return nil, err
	}
	defer t.unlock()
	if t.final != nil {
		return t.final, nil
	}
	last := t.Layers() - 1
	if t.states[last+1] == nil {
		if _, _, err := t.layer(ctx, last); err != nil {
			return nil, err
		}
	}
	f, err := t.model.Logits(ctx, t.states[last+1])
	if err != nil {
		return nil, err
	}
	t.final = f
	return f, nil
}

// V41LayerRecord is layers/NN.json of a V4.1 layer.
type V41LayerRecord struct {
	Layer       int       `json:"layer"`
	Role        v4.Role41 `json:"role"`
	Description string    `json:"description"`
	Precision   string    `json:"precision"`
	TimingMS    struct {
		LoadCPU Num `json:"load_cpu"`
		Forward Num `json:"forward"`
	} `json:"timing_ms"`
	RoutedExpertsRun int   `json:"routed_experts_run"`
	StateTensors     int   `json:"state_tensors"`
	StateNumel       int64 `json:"state_numel"`
	StateBytes       int64 `json:"state_bytes"`
	// WeightBytesRead counts routed experts only where a token selected
	// them, and Engram table rows only where a token hashed to them.
	WeightBytesRead int64       `json:"weight_bytes_read"`
	StreamBefore    HiddenStats `json:"stream_before"`
	StreamAfter     HiddenStats `json:"stream_after"`
	AttnOut         HiddenStats `json:"attn_out"`
	FFNOut          HiddenStats `json:"ffn_out"`
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

func floats64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func (t *V41Tracer) record(in *v4.State41, out *v4.LayerOutput41) *V41LayerRecord {
	cfg := t.model.Config
	l, d, n := out.Layer, cfg.Hidden, cfg.HCMult
	r := &V41LayerRecord{
		Layer: l, Role: out.Role, Description: out.Role.Describe(), Precision: string(t.precision), RoutedExpertsRun: out.ExpertsRun,
		StreamBefore: hiddenStats(in.Stream, d), StreamAfter: hiddenStats(out.StreamOut, d),
		AttnOut: hiddenStats(out.AttnOut, d), FFNOut: hiddenStats(out.FFNOut, d),
		PreMixIn: spread(floats64(out.PreMixIn), true), PreMixOut: spread(floats64(out.PreMixOut), true),
		HC: map[string]HCStats{"attn": hcStats(out.HCAttn, n), "ffn": hcStats(out.HCFFN, n)},
	}
	r.StateTensors, r.StateNumel, r.StateBytes = t.model.LayerTensors(l)
	r.WeightBytesRead = out.WeightBytes
	r.TimingMS.LoadCPU = Num(out.LoadTime.Seconds() * 1000)
	r.TimingMS.Forward = Num(out.Time.Seconds() * 1000)
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
		pk := PromptKeys{ID: t.prompts[pi].ID, CompressedEntries: len(sa.Compressed) / cfg.HeadDim}
		nw := min(T, cfg.Window)
		for i, v := range sa.TopK {
			switch {
			case v < 0:
			case i%sa.K < nw:
				pk.Window++
			default:
				pk.Compressed++
			}
		}
		r.Keys = append(r.Keys, pk)
		if sa.IndexTopK != nil {
			px := PromptIndexer{ID: t.prompts[pi].ID}
			var margins []float64
			for pos := range T {
				m := float64(sa.IndexMargin[pos])
				if !math.IsInf(m, 0) {
					margins = append(margins, m)
				}
				px.Tokens = append(px.Tokens, IndexerPicks{Position: pos, Picks: sa.IndexTopK[pos*sa.IndexK : (pos+1)*sa.IndexK], Margin: Num(m)})
			}
			px.Margin = spread(margins, true)
			r.Indexer = append(r.Indexer, px)
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
	rt := out.Routes
	r.Routing = routingTrace(t.prompts, t.tok, cfg.RoutedExperts, &model.Routes{K: rt.K, IDs: rt.IDs, Weights: rt.Weights, Margin: rt.Margin})
	return r
}

// LayerJSON is layers/NN.json.
func (t *V41Tracer) LayerJSON(ctx context.Context, l int) ([]byte, error) {
	_, r, err := t.Layer(ctx, l)
	if err != nil {
		return nil, err
	}
	return encode(r)
}

// Activations lists layer l's tensors: per prompt stream_out [T, hc, D],
// attn_out and ffn_out [T, D], pre_mix [T, hc] (carried to the next
// layer), compressed_kv [T/ratio, head_dim] (the shared compressed KV
// the layer attends over), indexer_topk [T, k] (index sources),
// candidates U8 [T, T/ratio] (the candidate mask, from the candidate
// source on), engram_ids I32 [T, orders x heads] and engram_gate
// [T, hc] (Engram layers), topk_ids and topk_weights [T, experts per
// token].
func (t *V41Tracer) Activations(l int) []V4Activation {
	cfg := t.model.Config
	role := cfg.Roles[l]
	var out []V4Activation
	for pi, p := range t.prompts {
		T := int64(len(p.TokenIDs))
		add := func(kind string, dt safetensors.DType, shape ...int64) {
			out = append(out, V4Activation{Name: p.ID + "." + kind, DType: dt, Shape: shape, prompt: pi, kind: kind})
		}
		add("stream_out", safetensors.F32, T, int64(cfg.HCMult), int64(cfg.Hidden))
		add("attn_out", safetensors.F32, T, int64(cfg.Hidden))
		add("ffn_out", safetensors.F32, T, int64(cfg.Hidden))
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
		add("topk_ids", safetensors.I32, T, int64(cfg.TopK))
		add("topk_weights", safetensors.F32, T, int64(cfg.TopK))
	}
	return out
}

// LogitActivations lists logits.safetensors: <id>.logits [T, vocab].
func (t *V41Tracer) LogitActivations() []V4Activation {
	var out []V4Activation
	for pi, p := range t.prompts {
		out = append(out, V4Activation{Name: p.ID + ".logits", DType: safetensors.F32,
			Shape: []int64{int64(len(p.TokenIDs)), int64(t.model.Config.Vocab)}, prompt: pi, kind: "logits"})
	}
	return out
}

// ReadActivation writes rows [r0, r1) of activation a (of layer l; -1 for
// the logits) into dst as little-endian values, running what it needs.
func (t *V41Tracer) ReadActivation(ctx context.Context, l int, a V4Activation, r0, r1 int, dst []byte) error {
	if int64(len(dst)) != int64(r1-r0)*a.RowBytes() || r0 < 0 || r1 > a.Rows() {
		return fmt.Errorf("%s: rows [%d, %d) into %d bytes", a.Name, r0, r1, len(dst))
	}
	w := int(a.RowBytes() / int64(a.DType.Bits()/8))
	row := 0
	for _, s := range t.seqs[:a.prompt] {
		row += len(s)
	}
	var src []float32
	var ids []int32
	if a.kind == "logits" {
		f, err := t.Final(ctx)
		if err != nil {
			return err
		}
		src = f.Logits
	} else {
		out, _, err := t.Layer(ctx, l)
		if err != nil {
			return err
		}
		sa := out.Seqs[a.prompt]
		switch a.kind {
		case "stream_out":
			src = out.StreamOut
		case "attn_out":
			src = out.AttnOut
		case "ffn_out":
			src = out.FFNOut
		case "pre_mix":
			src = out.PreMixOut
		case "compressed_kv":
			src, row = sa.Compressed, 0
		case "indexer_topk":
			ids, row = sa.IndexTopK, 0
		case "candidates":
			mask := out.Out.Shared[a.prompt].Candidates
			if len(mask) != a.Rows()*w {
				return fmt.Errorf("%s: the candidate mask holds %d entries, not %d x %d", a.Name, len(mask), a.Rows(), w)
			}
			for i, keep := range mask[r0*w : r1*w] {
				dst[i] = 0
				if keep {
					dst[i] = 1
				}
			}
			return nil
		case "engram_ids":
			ids = out.Engram.HashIDs
		case "engram_gate":
			src = out.Engram.Gate
		case "topk_ids":
			ids = out.Routes.IDs
		case "topk_weights":
			src = out.Routes.Weights
		default:
			return fmt.Errorf("%s: unknown activation", a.Name)
		}
	}
	if ids != nil {
		for i, v := range ids[(row+r0)*w : (row+r1)*w] {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
		return nil
	}
	for i, v := range src[(row+r0)*w : (row+r1)*w] {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
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
	if n := t.Layers(); n > 0 {
		if _, _, err := t.Layer(ctx, n-1); err != nil {
			return nil, err
		}
	}
	cfg := t.model.Config
	d := V41Document{
		SchemaVersion: SchemaVersion,
		CapturedAtUTC: time.Now().UTC().Format(time.RFC3339),
		Model:         cfg.ModelType,
		Reference:     V41Reference,
		Precision:     string(t.precision),
		Environment: Environment{
			Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			CPUThreads: runtime.GOMAXPROCS(0), Backend: "cpu", Device: "host (pure Go V4 engine)",
			MatmulKernel: simd.Kernel(), ComputeDType: "float32",
		},
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
	if err := t.lock(ctx); err != nil {
		return nil, err
	}
	d.Layers = slices.Clone(t.records)
	t.unlock()
	return encode(d)
}

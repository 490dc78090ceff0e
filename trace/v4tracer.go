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

// V4Reference is the code whose semantics a V4 trace follows.
const V4Reference = "deepseek-ai/DeepSeek-V4-Flash inference/model.py and kernel.py @60d8d70 (prefill, float32 activations)"

// V4Tracer runs prompts through a DeepSeek-V4 model's layers on demand,
// as Tracer does for V2/V3: it memoises the [tokens, hc, D] stream
// entering every computed layer, every layer's record, the full outputs
// of the most recent layers and the logits. It is safe for concurrent
// use; one forward runs at a time.
type V4Tracer struct {
	model     *v4.Model
	precision v4.Precision
	prompts   []Prompt
	tok       *tokenizer.Tokenizer
	log       *slog.Logger
	seqs      [][]int
	tokens    int

	sem     chan struct{}
	streams [][]float32 // streams[l] enters layer l; streams[Layers] leaves the last
	records []*V4LayerRecord
	recent  []*v4.LayerOutput
	final   *v4.Final

	forwards atomic.Int64
}

// NewV4 returns a tracer of prompts (already encoded) through m at
// precision p.
func NewV4(m *v4.Model, p v4.Precision, prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *V4Tracer {
	t := &V4Tracer{model: m, precision: p, prompts: prompts, tok: tok, log: log,
		sem:     make(chan struct{}, 1),
		streams: make([][]float32, m.Runnable()+1),
		records: make([]*V4LayerRecord, m.Runnable()),
	}
	for _, p := range prompts {
		t.seqs = append(t.seqs, p.TokenIDs)
		t.tokens += len(p.TokenIDs)
	}
	return t
}

// Layers is the number of layers the tracer can run.
func (t *V4Tracer) Layers() int { return len(t.records) }

// BackendName is "cpu" for the host V4 engine, else the name of the
// backend the model's products run on.
func (t *V4Tracer) BackendName() string {
	if b := t.model.Backend(); b != nil {
		return b.Name()
	}
	return "cpu"
}

// Forwards is the number of layer forwards run so far.
func (t *V4Tracer) Forwards() int64 { return t.forwards.Load() }

// PromptsJSON is prompts.json.
func (t *V4Tracer) PromptsJSON() ([]byte, error) { return encode(t.prompts) }

func (t *V4Tracer) lock(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *V4Tracer) unlock() { <-t.sem }

// Layer returns layer l's outputs and record, running whatever layers up
// to l have not run yet.
func (t *V4Tracer) Layer(ctx context.Context, l int) (*v4.LayerOutput, *V4LayerRecord, error) {
	if l < 0 || l >= t.Layers() {
		return nil, nil, fmt.Errorf("layer %d is not traceable (layers 0-%d are)", l, t.Layers()-1)
	}
	if err := t.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer t.unlock()
	return t.layer(ctx, l)
}

// layer is Layer with the lock held.
func (t *V4Tracer) layer(ctx context.Context, l int) (*v4.LayerOutput, *V4LayerRecord, error) {
	for _, o := range t.recent {
		if o.Layer == l {
			return o, t.records[l], nil
		}
	}
	from := l
	for t.streams[from] == nil && from > 0 {
		from--
	}
	if t.streams[from] == nil {
		if err := t.embed(); err != nil {
			return nil, nil, err
		}
	}
	var out *v4.LayerOutput
	for j := from; j <= l; j++ {
		var err error
		if out, err = t.forward(ctx, j); err != nil {
			return nil, nil, err
		}
	}
	return out, t.records[l], nil
}

// embed expands the prompts' embedding rows to hc_mult identical streams.
func (t *V4Tracer) embed() error {
	var ids []int
	for _, s := range t.seqs {
		ids = append(ids, s...)
	}
	e, err := t.model.EmbedRows(ids)
	if err != nil {
		return err
	}
	d, n := t.model.Config.Hidden, t.model.Config.HCMult
	s := make([]float32, 0, len(e)*n)
	for r := 0; r < len(e); r += d {
		for range n {
			s = append(s, e[r:r+d]...)
		}
	}
	t.streams[0] = s
	return nil
}

func (t *V4Tracer) forward(ctx context.Context, j int) (*v4.LayerOutput, error) {
	in := t.streams[j]
	out, err := t.model.Forward(ctx, j, in, t.seqs, t.precision)
	if err != nil {
		return nil, err
	}
	t.forwards.Add(1)
	if t.log != nil {
		t.log.Info("trace: layer forward", "layer", j, "tokens", t.tokens, "backend", t.BackendName(),
			"precision", string(t.precision), "ms", out.Time.Milliseconds(), "load_ms", out.LoadTime.Milliseconds())
	}
	t.streams[j+1] = out.StreamOut
	if t.records[j] == nil {
		t.records[j] = t.record(in, out)
	}
	t.recent = append(t.recent, out)
	if len(t.recent) > recentOutputs {
		t.recent = t.recent[1:]
	}
	return out, nil
}

// Final returns the hc head, norm and logits of every position, running
// every layer first. It fails when some layer cannot run.
func (t *V4Tracer) Final(ctx context.Context) (*v4.Final, error) {
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
	if t.streams[last+1] == nil {
		if _, _, err := t.layer(ctx, last); err != nil {
			return nil, err
		}
	}
	f, err := t.model.Logits(ctx, t.streams[last+1])
	if err != nil {
		return nil, err
	}
	t.final = f
	return f, nil
}

// V4LayerRecord is layers/NN.json of a V4 layer.
type V4LayerRecord struct {
	Layer         int    `json:"layer"`
	Attention     string `json:"attention"` // swa, csa or hca
	CompressRatio int    `json:"compress_ratio"`
	Role          string `json:"role"`
	HashRouted    bool   `json:"hash_routed"`
	Precision     string `json:"precision"`
	TimingMS      struct {
		LoadCPU Num `json:"load_cpu"`
		Forward Num `json:"forward"`
	} `json:"timing_ms"`
	RoutedExpertsRun int `json:"routed_experts_run"`
	// The layer's tensors in the checkpoint, and what the forward read of
	// them (routed experts only where a token selected them).
	StateTensors    int   `json:"state_tensors"`
	StateNumel      int64 `json:"state_numel"`
	StateBytes      int64 `json:"state_bytes"`
	WeightBytesRead int64 `json:"weight_bytes_read"`
	// The streams as rows of D (tokens × hc_mult rows).
	StreamBefore HiddenStats `json:"stream_before"`
	StreamAfter  HiddenStats `json:"stream_after"`
	// AttnOut and FFNOut are the sublayer outputs before the hc expand.
	AttnOut HiddenStats        `json:"attn_out"`
	FFNOut  HiddenStats        `json:"ffn_out"`
	HC      map[string]HCStats `json:"hc"`
	Keys    []PromptKeys       `json:"keys_attended"`
	Indexer []PromptIndexer    `json:"indexer,omitempty"`
	Routing *RoutingTrace      `json:"routing"`
}

// HCStats describes one hyper-connection site's coefficients over every
// token.
type HCStats struct {
	Pre  Spread `json:"pre"`
	Post Spread `json:"post"`
	// CombDiagonal is comb[j, j] (a stream kept in place), CombOffDiagonal
	// the mixing between streams.
	CombDiagonal    Spread `json:"comb_diagonal"`
	CombOffDiagonal Spread `json:"comb_off_diagonal"`
}

// PromptKeys counts the keys one prompt's queries attended, summed over
// its tokens: window rows and compressed entries.
type PromptKeys struct {
	ID                string `json:"id"`
	Window            int    `json:"window"`
	Compressed        int    `json:"compressed"`
	CompressedEntries int    `json:"compressed_entries"`
}

// PromptIndexer is one prompt's indexer picks (CSA layers).
type PromptIndexer struct {
	ID     string         `json:"id"`
	Margin Spread         `json:"margin"`
	Tokens []IndexerPicks `json:"tokens"`
}

// IndexerPicks is one query's compressed positions, ascending, and its
// margin: the k-th minus the (k+1)-th score (null when nothing was
// decided).
type IndexerPicks struct {
	Position int     `json:"position"`
	Picks    []int32 `json:"picks"`
	Margin   Num     `json:"margin"`
}

func (t *V4Tracer) record(in []float32, out *v4.LayerOutput) *V4LayerRecord {
	cfg := t.model.Config
	l, d, n := out.Layer, cfg.Hidden, cfg.HCMult
	r := &V4LayerRecord{
		Layer: l, Attention: string(cfg.Kind(l)), CompressRatio: cfg.Ratio(l), Role: cfg.Role(l),
		HashRouted: cfg.HashRouted(l), Precision: string(t.precision), RoutedExpertsRun: out.ExpertsRun,
		StreamBefore: hiddenStats(in, d), StreamAfter: hiddenStats(out.StreamOut, d),
		AttnOut: hiddenStats(out.AttnOut, d), FFNOut: hiddenStats(out.FFNOut, d),
		HC: map[string]HCStats{"attn": hcStats(out.HCAttn, n), "ffn": hcStats(out.HCFFN, n)},
	}
	r.StateTensors, r.StateNumel, r.StateBytes = t.model.LayerTensors(l)
	r.WeightBytesRead = out.WeightBytes
	r.TimingMS.LoadCPU = Num(out.LoadTime.Seconds() * 1000)
	r.TimingMS.Forward = Num(out.Time.Seconds() * 1000)
	for pi, sa := range out.Seqs {
		pk := PromptKeys{ID: t.prompts[pi].ID, CompressedEntries: len(sa.Compressed) / cfg.HeadDim}
		nw := min(len(t.seqs[pi]), cfg.Window)
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
		if sa.IndexTopK == nil {
			continue
		}
		px := PromptIndexer{ID: t.prompts[pi].ID}
		var margins []float64
		for pos := range len(sa.IndexMargin) {
			m := float64(sa.IndexMargin[pos])
			if !math.IsInf(m, 0) {
				margins = append(margins, m)
			}
			px.Tokens = append(px.Tokens, IndexerPicks{Position: pos, Picks: ascendingPicks(sa.IndexTopK[pos*sa.IndexK : (pos+1)*sa.IndexK]), Margin: Num(m)})
		}
		px.Margin = spread(margins, true)
		r.Indexer = append(r.Indexer, px)
	}
	rt := out.Routes
	r.Routing = routingTrace(t.prompts, t.tok, cfg.RoutedExperts, &model.Routes{K: rt.K, IDs: rt.IDs, Weights: rt.Weights, Margin: rt.Margin})
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

func hcStats(h v4.HC, n int) HCStats {
	var diag, off []float64
	for i, v := range h.Comb {
		if j, k := i/n%n, i%n; j == k {
			diag = append(diag, float64(v))
		} else {
			off = append(off, float64(v))
		}
	}
	f := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	return HCStats{Pre: spread(f(h.Pre), true), Post: spread(f(h.Post), true), CombDiagonal: spread(diag, true), CombOffDiagonal: spread(off, true)}
}

// LayerJSON is layers/NN.json.
func (t *V4Tracer) LayerJSON(ctx context.Context, l int) ([]byte, error) {
	_, r, err := t.Layer(ctx, l)
	if err != nil {
		return nil, err
	}
	return encode(r)
}

// V4Activation is one tensor of a V4 layers/NN.safetensors or of
// logits.safetensors: [rows, ...] of one prompt.
type V4Activation struct {
	Name   string // <prompt id>.<kind>
	DType  safetensors.DType
	Shape  []int64
	prompt int
	kind   string
}

// Rows is the first dimension.
func (a V4Activation) Rows() int { return int(a.Shape[0]) }

// RowBytes is the size of one row.
func (a V4Activation) RowBytes() int64 {
	n := int64(a.DType.Bits() / 8)
	for _, d := range a.Shape[1:] {
		n *= d
	}
	return n
}

// Activations lists layer l's tensors: per prompt stream_out [T, hc, D],
// attn_out and ffn_out [T, D], compressed_kv [T/ratio, head_dim]
// (compressed layers, when the prompt fills a group), indexer_topk
// [T, k] (CSA layers), topk_ids and topk_weights [T, experts per token].
func (t *V4Tracer) Activations(l int) []V4Activation {
	cfg := t.model.Config
	var out []V4Activation
	for pi, p := range t.prompts {
		T := int64(len(p.TokenIDs))
		add := func(kind string, dt safetensors.DType, shape ...int64) {
			out = append(out, V4Activation{Name: p.ID + "." + kind, DType: dt, Shape: shape, prompt: pi, kind: kind})
		}
		add("stream_out", safetensors.F32, T, int64(cfg.HCMult), int64(cfg.Hidden))
		add("attn_out", safetensors.F32, T, int64(cfg.Hidden))
		add("ffn_out", safetensors.F32, T, int64(cfg.Hidden))
		if r := cfg.Ratio(l); r > 0 && T/int64(r) > 0 {
			add("compressed_kv", safetensors.F32, T/int64(r), int64(cfg.HeadDim))
			if cfg.Kind(l) == v4.CSA {
				add("indexer_topk", safetensors.I32, T, int64(min(cfg.IndexTopK, int(T)/r)))
			}
		}
		add("topk_ids", safetensors.I32, T, int64(cfg.TopK))
		add("topk_weights", safetensors.F32, T, int64(cfg.TopK))
	}
	return out
}

// LogitActivations lists logits.safetensors: <id>.logits [T, vocab].
func (t *V4Tracer) LogitActivations() []V4Activation {
	var out []V4Activation
	for pi, p := range t.prompts {
		out = append(out, V4Activation{Name: p.ID + ".logits", DType: safetensors.F32,
			Shape: []int64{int64(len(p.TokenIDs)), int64(t.model.Config.Vocab)}, prompt: pi, kind: "logits"})
	}
	return out
}

// first is the first token row of prompt pi.
func (t *V4Tracer) first(pi int) int {
	n := 0
	for _, s := range t.seqs[:pi] {
		n += len(s)
	}
	return n
}

// ReadActivation writes rows [r0, r1) of activation a (of layer l; -1 for
// the logits) into dst as little-endian values, running what it needs.
func (t *V4Tracer) ReadActivation(ctx context.Context, l int, a V4Activation, r0, r1 int, dst []byte) error {
	if int64(len(dst)) != int64(r1-r0)*a.RowBytes() || r0 < 0 || r1 > a.Rows() {
		return fmt.Errorf("%s: rows [%d, %d) into %d bytes", a.Name, r0, r1, len(dst))
	}
	w := int(a.RowBytes() / 4)
	var src []float32
	var ids []int32
	row := t.first(a.prompt)
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
		case "compressed_kv":
			src, row = sa.Compressed, 0
		case "indexer_topk":
			ids = make([]int32, 0, len(sa.IndexTopK))
			for r := 0; r < len(sa.IndexTopK); r += sa.IndexK {
				ids = append(ids, ascendingPicks(sa.IndexTopK[r:r+sa.IndexK])...)
			}
			row = 0
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
	if n := t.Layers(); n > 0 {
		if _, _, err := t.Layer(ctx, n-1); err != nil {
			return nil, err
		}
	}
	cfg := t.model.Config
	device := "host (pure Go V4 engine)"
	if b := t.model.Backend(); b != nil {
		device = b.Device() + " (products and V4 operations; the rest on the host V4 engine)"
	}
	d := V4Document{
		SchemaVersion: SchemaVersion,
		CapturedAtUTC: time.Now().UTC().Format(time.RFC3339),
		Model:         cfg.ModelType,
		Reference:     V4Reference,
		Precision:     string(t.precision),
		Environment: Environment{
			Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			CPUThreads: runtime.GOMAXPROCS(0), Backend: t.BackendName(), Device: device,
			MatmulKernel: simd.Kernel(), ComputeDType: "float32",
		},
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
	if err := t.lock(ctx); err != nil {
		return nil, err
	}
	d.Layers = slices.Clone(t.records)
	t.unlock()
	return encode(d)
}

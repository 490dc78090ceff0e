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
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
	"github.com/dsfs/dsfs/trace/v4"
)

// v4Engine is what v4Core runs of a V4-family engine (v4.Model,
// v4.Model41): S is the state entering a layer, O one layer's outputs
// and F the head's.
type v4Engine[S, O, F any] interface {
	Backend() backend.Backend
	LayerTensors(l int) (tensors int, elements, bytes int64)
	EmbedRows(ids []int) ([]float32, error)
	Forward(ctx context.Context, l int, in S, seqs [][]int, p v4.Precision) (*O, error)
	Logits(ctx context.Context, in S) (*F, error)
}

// v4Run is what v4Core reads of one layer forward.
type v4Run[S any] struct {
	layer       int
	next        S // the state leaving the layer
	load, total time.Duration
	experts     int   // routed experts run
	weightBytes int64 // checkpoint bytes read
	// streamOut [tokens, hc, D] leaves the layer; attnOut and ffnOut
	// [tokens, D] are the sublayer outputs before the hc expand.
	streamOut, attnOut, ffnOut []float32
}

// v4Family is what sets the V4 and V4.1 tracers apart; R is a layer's
// record.
type v4Family[S, O, R, F any] struct {
	config *v4.Config
	// start is the state entering layer 0, made of the prompts' embedding
	// rows.
	start  func(rows []float32) S
	run    func(out *O) v4Run[S]
	record func(in S, out *O) *R
	logits func(f *F) []float32
	// extra adds layer l's activations of one prompt of T tokens that
	// come between ffn_out and topk_ids.
	extra func(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64))
	// rows is where activation a (not the logits) of layer output out lies.
	rows func(out *O, a V4Activation) (activationRows, error)
}

// activationRows is where ReadActivation finds an activation's values:
// f32, i32 or mask (written as U8 0/1), rows of the whole batch counted
// from the prompt's first token, or of the prompt alone when own is set.
type activationRows struct {
	f32  []float32
	i32  []int32
	mask []bool
	own  bool
}

// v4Core is the part of the V4 and V4.1 tracers that does not depend on
// the layer: the lock, the memo of the states entering computed layers,
// the records, the recent outputs and the logits, the prompts, the
// activation files and the common parts of trace.json. It is safe for
// concurrent use; one forward runs at a time.
type v4Core[S, O, R, F any] struct {
	engine    v4Engine[S, O, F]
	family    v4Family[S, O, R, F]
	precision v4.Precision
	prompts   []Prompt
	tok       *tokenizer.Tokenizer
	log       *slog.Logger
	seqs      [][]int
	tokens    int

	sem     chan struct{}
	states  []*S // states[l] enters layer l (nil until computed); states[Layers] leaves the last
	records []*R
	recent  []*O
	final   *F

	forwards atomic.Int64
}

func newV4Core[S, O, R, F any](e v4Engine[S, O, F], runnable int, f v4Family[S, O, R, F], p v4.Precision, prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *v4Core[S, O, R, F] {
	t := &v4Core[S, O, R, F]{engine: e, family: f, precision: p, prompts: prompts, tok: tok, log: log,
		sem:     make(chan struct{}, 1),
		states:  make([]*S, runnable+1),
		records: make([]*R, runnable),
	}
	for _, p := range prompts {
		t.seqs = append(t.seqs, p.TokenIDs)
		t.tokens += len(p.TokenIDs)
	}
	return t
}

// Layers is the number of layers the tracer can run.
func (t *v4Core[S, O, R, F]) Layers() int { return len(t.records) }

// BackendName is "cpu" for the host engine, else the name of the
// backend the model's products run on.
func (t *v4Core[S, O, R, F]) BackendName() string {
	if b := t.engine.Backend(); b != nil {
		return b.Name()
	}
	return "cpu"
}

// Forwards is the number of layer forwards run so far.
func (t *v4Core[S, O, R, F]) Forwards() int64 { return t.forwards.Load() }

// PromptsJSON is prompts.json.
func (t *v4Core[S, O, R, F]) PromptsJSON() ([]byte, error) { return encode(t.prompts) }

func (t *v4Core[S, O, R, F]) lock(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *v4Core[S, O, R, F]) unlock() { <-t.sem }

// Layer returns layer l's outputs and record, running whatever layers up
// to l have not run yet.
func (t *v4Core[S, O, R, F]) Layer(ctx context.Context, l int) (*O, *R, error) {
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
func (t *v4Core[S, O, R, F]) layer(ctx context.Context, l int) (*O, *R, error) {
	for _, o := range t.recent {
		if t.family.run(o).layer == l {
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
		e, err := t.engine.EmbedRows(ids)
		if err != nil {
			return nil, nil, err
		}
		s := t.family.start(e)
		t.states[0] = &s
	}
	var out *O
	for j := from; j <= l; j++ {
		var err error
		if out, err = t.forward(ctx, j); err != nil {
			return nil, nil, err
		}
	}
	return out, t.records[l], nil
}

func (t *v4Core[S, O, R, F]) forward(ctx context.Context, j int) (*O, error) {
	in := *t.states[j]
	out, err := t.engine.Forward(ctx, j, in, t.seqs, t.precision)
	if err != nil {
		return nil, err
	}
	t.forwards.Add(1)
	run := t.family.run(out)
	if t.log != nil {
		t.log.Info("trace: layer forward", "layer", j, "tokens", t.tokens, "backend", t.BackendName(),
			"precision", string(t.precision), "ms", run.total.Milliseconds(), "load_ms", run.load.Milliseconds())
	}
	t.states[j+1] = &run.next
	if t.records[j] == nil {
		t.records[j] = t.family.record(in, out)
	}
	t.recent = append(t.recent, out)
	if len(t.recent) > recentOutputs {
		t.recent = t.recent[1:]
	}
	return out, nil
}

// Final returns the head's outputs and logits of every position, running
// every layer first. It fails when some layer cannot run.
func (t *v4Core[S, O, R, F]) Final(ctx context.Context) (*F, error) {
	if t.Layers() < t.family.config.Layers {
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
	f, err := t.engine.Logits(ctx, *t.states[last+1])
	if err != nil {
		return nil, err
	}
	t.final = f
	return f, nil
}

// LayerRun is what a V4 or V4.1 layer record says of the forward that
// made it: its precision and timing, the routed experts it ran, the
// layer's tensors in the checkpoint and the bytes the forward read of
// them (routed experts only where a token selected them, Engram table
// rows only where a token hashed to them), the streams entering and
// leaving the layer as rows of D (tokens × hc_mult rows), and the
// sublayer outputs before the hc expand.
type LayerRun struct {
	Precision string `json:"precision"`
	TimingMS  struct {
		LoadCPU Num `json:"load_cpu"`
		Forward Num `json:"forward"`
	} `json:"timing_ms"`
	RoutedExpertsRun int         `json:"routed_experts_run"`
	StateTensors     int         `json:"state_tensors"`
	StateNumel       int64       `json:"state_numel"`
	StateBytes       int64       `json:"state_bytes"`
	WeightBytesRead  int64       `json:"weight_bytes_read"`
	StreamBefore     HiddenStats `json:"stream_before"`
	StreamAfter      HiddenStats `json:"stream_after"`
	AttnOut          HiddenStats `json:"attn_out"`
	FFNOut           HiddenStats `json:"ffn_out"`
}

// layerRun is the LayerRun of the forward that made out from the stream
// before [tokens, hc, D].
func (t *v4Core[S, O, R, F]) layerRun(before []float32, out *O) LayerRun {
	run := t.family.run(out)
	d := t.family.config.Hidden
	r := LayerRun{Precision: string(t.precision), RoutedExpertsRun: run.experts, WeightBytesRead: run.weightBytes,
		StreamBefore: hiddenStats(before, d), StreamAfter: hiddenStats(run.streamOut, d),
		AttnOut: hiddenStats(run.attnOut, d), FFNOut: hiddenStats(run.ffnOut, d)}
	r.StateTensors, r.StateNumel, r.StateBytes = t.engine.LayerTensors(run.layer)
	r.TimingMS.LoadCPU = Num(run.load.Seconds() * 1000)
	r.TimingMS.Forward = Num(run.total.Seconds() * 1000)
	return r
}

// LayerJSON is layers/NN.json.
func (t *v4Core[S, O, R, F]) LayerJSON(ctx context.Context, l int) ([]byte, error) {
	_, r, err := t.Layer(ctx, l)
	if err != nil {
		return nil, err
	}
	return encode(r)
}

// V4Activation is one tensor of a V4 or V4.1 layers/NN.safetensors or of
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
// attn_out and ffn_out [T, D], what the family adds (see
// V4Tracer.Activations, V41Tracer.Activations), then topk_ids and
// topk_weights [T, experts per token].
func (t *v4Core[S, O, R, F]) Activations(l int) []V4Activation {
	cfg := t.family.config
	var out []V4Activation
	for pi, p := range t.prompts {
		T := int64(len(p.TokenIDs))
		add := func(kind string, dt safetensors.DType, shape ...int64) {
			out = append(out, V4Activation{Name: p.ID + "." + kind, DType: dt, Shape: shape, prompt: pi, kind: kind})
		}
		add("stream_out", safetensors.F32, T, int64(cfg.HCMult), int64(cfg.Hidden))
		add("attn_out", safetensors.F32, T, int64(cfg.Hidden))
		add("ffn_out", safetensors.F32, T, int64(cfg.Hidden))
		t.family.extra(l, T, add)
		add("topk_ids", safetensors.I32, T, int64(cfg.TopK))
		add("topk_weights", safetensors.F32, T, int64(cfg.TopK))
	}
	return out
}

// LogitActivations lists logits.safetensors: <id>.logits [T, vocab].
func (t *v4Core[S, O, R, F]) LogitActivations() []V4Activation {
	var out []V4Activation
	for pi, p := range t.prompts {
		out = append(out, V4Activation{Name: p.ID + ".logits", DType: safetensors.F32,
			Shape: []int64{int64(len(p.TokenIDs)), int64(t.family.config.Vocab)}, prompt: pi, kind: "logits"})
	}
	return out
}

// ReadActivation writes rows [r0, r1) of activation a (of layer l; -1 for
// the logits) into dst as little-endian values, running what it needs.
func (t *v4Core[S, O, R, F]) ReadActivation(ctx context.Context, l int, a V4Activation, r0, r1 int, dst []byte) error {
	if int64(len(dst)) != int64(r1-r0)*a.RowBytes() || r0 < 0 || r1 > a.Rows() {
		return fmt.Errorf("%s: rows [%d, %d) into %d bytes", a.Name, r0, r1, len(dst))
	}
	w := int(a.RowBytes() / int64(a.DType.Bits()/8))
	var src activationRows
	if a.kind == "logits" {
		f, err := t.Final(ctx)
		if err != nil {
			return err
		}
		src.f32 = t.family.logits(f)
	} else {
		out, _, err := t.Layer(ctx, l)
		if err != nil {
			return err
		}
		if src, err = t.family.rows(out, a); err != nil {
			return err
		}
	}
	row := 0
	if !src.own {
		for _, s := range t.seqs[:a.prompt] {
			row += len(s)
		}
	}
	switch {
	case src.mask != nil:
		for i, keep := range src.mask[(row+r0)*w : (row+r1)*w] {
			dst[i] = 0
			if keep {
				dst[i] = 1
			}
		}
	case src.i32 != nil:
		for i, v := range src.i32[(row+r0)*w : (row+r1)*w] {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
	default:
		for i, v := range src.f32[(row+r0)*w : (row+r1)*w] {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	}
	return nil
}

// runAll runs every layer the tracer can run.
func (t *v4Core[S, O, R, F]) runAll(ctx context.Context) error {
	if n := t.Layers(); n > 0 {
		if _, _, err := t.Layer(ctx, n-1); err != nil {
			return err
		}
	}
	return nil
}

// environment is trace.json's environment; ops names the operations a
// backend runs besides the products ("V4", "V4.1").
func (t *v4Core[S, O, R, F]) environment(ops string) Environment {
	device := "host (pure Go V4 engine)"
	if b := t.engine.Backend(); b != nil {
		device = b.Device() + " (products and " + ops + " operations; the rest on the host V4 engine)"
	}
	return Environment{
		Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUThreads: runtime.GOMAXPROCS(0), Backend: t.BackendName(), Device: device,
		MatmulKernel: simd.Kernel(), ComputeDType: "float32",
	}
}

// recorded is the layer records made so far.
func (t *v4Core[S, O, R, F]) recorded(ctx context.Context) ([]*R, error) {
	if err := t.lock(ctx); err != nil {
		return nil, err
	}
	defer t.unlock()
	return slices.Clone(t.records), nil
}

// capturedAt is trace.json's captured_at_utc.
func capturedAt() string { return time.Now().UTC().Format(time.RFC3339) }

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

func hcStats(h v4.HC, n int) HCStats {
	var diag, off []float64
	for i, v := range h.Comb {
		if j, k := i/n%n, i%n; j == k {
			diag = append(diag, float64(v))
		} else {
			off = append(off, float64(v))
		}
	}
	return HCStats{Pre: spread(floats64(h.Pre), true), Post: spread(floats64(h.Post), true), CombDiagonal: spread(diag, true), CombOffDiagonal: spread(off, true)}
}

func floats64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// PromptKeys counts the keys one prompt's queries attended, summed over
// its tokens: window rows and compressed entries.
type PromptKeys struct {
	ID                string `json:"id"`
	Window            int    `json:"window"`
	Compressed        int    `json:"compressed"`
	CompressedEntries int    `json:"compressed_entries"`
}

// promptKeys counts topk [T, k]: per query the first window slots (of
// the first nw valid) are window rows, the rest compressed entries; -1
// is none.
func promptKeys(id string, topk []int32, k, nw, entries int) PromptKeys {
	pk := PromptKeys{ID: id, CompressedEntries: entries}
	for i, v := range topk {
		switch {
		case v < 0:
		case i%k < nw:
			pk.Window++
		default:
			pk.Compressed++
		}
	}
	return pk
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

// promptIndexer is one prompt's indexer record from its T queries'
// picks [T, k] and margins; picks maps one query's row to what is
// recorded.
func promptIndexer(id string, T int, topk []int32, k int, margin []float32, picks func([]int32) []int32) PromptIndexer {
	px := PromptIndexer{ID: id}
	var margins []float64
	for pos := range T {
		m := float64(margin[pos])
		if !math.IsInf(m, 0) {
			margins = append(margins, m)
		}
		px.Tokens = append(px.Tokens, IndexerPicks{Position: pos, Picks: picks(topk[pos*k : (pos+1)*k]), Margin: Num(m)})
	}
	px.Margin = spread(margins, true)
	return px
}

// routes is a V4 layer's routing as a V2/V3 one's, for routingTrace.
func routes(r v4.Routes) *deepseek2.Routes {
	return &deepseek2.Routes{K: r.K, IDs: r.IDs, Weights: r.Weights, Margin: r.Margin}
}

package trace

import (
	"context"
	"encoding/binary"
	"errors"
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
)

// recentOutputs is how many layers' full outputs a Core keeps: the layer
// being read and the one before, so that reading layer N's files in any
// order runs its forward once, while memory stays at a few layers'
// outputs whatever the model's depth.
const recentOutputs = 2

// Engine is what a Core runs of a family's model: S is the state entering
// a layer, O one layer's outputs and F the head's.
type Engine[S, O, F any] interface {
	// EmbedRows returns the embedding rows of ids, [len(ids), hidden].
	EmbedRows(ids []int) ([]float32, error)
	// Forward runs layer l on the state entering it.
	Forward(ctx context.Context, l int, in S) (*O, error)
	// Logits runs the head on the state leaving the last layer; a family
	// without one returns an error saying so.
	Logits(ctx context.Context, in S) (*F, error)
	// LayerTensors counts layer l's tensors in the checkpoint.
	LayerTensors(l int) (tensors int, elements, bytes int64)
}

// Spec is what sets a family's trace apart, for NewCore: how its state
// starts and passes from layer to layer, what it records of a layer and
// serves of it, and its trace.json.
type Spec[S, O, R, F any] struct {
	// Layers is the number of layers in the config; Runnable those the
	// tracer can run (the ones before the first with a problem).
	Layers, Runnable int
	// Backend names what the layers run on, for the records and stats.
	Backend string
	// Start is the state entering layer 0, made of the prompts' embedding
	// rows.
	Start func(rows []float32) S
	// Started is Options.Started: called once, before the first embedding.
	Started func(Cost)
	// Run describes a layer forward's outputs for the core.
	Run func(out *O) Run[S]
	// Record makes layer l's record from the state entering it and its
	// outputs, once.
	Record func(in S, out *O) *R
	// Tensors lists one prompt's activations of layer l (a prompt of T
	// tokens): add is called per tensor, in file order.
	Tensors func(l int, T int64, add func(kind string, dt safetensors.DType, shape ...int64))
	// Rows is where activation a (not the logits) of a layer's outputs
	// lies.
	Rows func(out *O, a Activation) (ActivationRows, error)
	// Logits are the head's logits [tokens, vocab]; nil for a family
	// whose trace serves none.
	Logits func(f *F) []float32
	// Vocab is the logits' width.
	Vocab int
	// Report is trace.json, the family's report of the whole trace (what
	// ran, on what, and every layer's record), made from the core once
	// every layer has run.
	Report func(ctx context.Context, c *Core[S, O, R, F]) (any, error)
	// Cost estimates what tracing the prompts holds.
	Cost func(lens []int, tensors int) Cost
	// Experts is what a layer's routed experts took in (see ExpertAmax);
	// nil for a family that records none.
	Experts func(out *O) (in, mid []float32)
	// Routing is a layer record's routes, nil for a layer that routes
	// nothing (a dense layer); the figures of trace/ are drawn from them.
	Routing func(r *R) *RoutingTrace
}

// ExpertAmax is what the routed experts of one layer took in over every
// prompt: per expert, the largest magnitude of the activations entering
// its gate and up projections (In) and its down projection (Mid); zero
// for an expert no token reached. A calibration of the experts' input
// scales reads it (nvfp4/'s --nvfp4-calibrate).
type ExpertAmax struct {
	Layer   int
	In, Mid []float32
}

// A Calibrator is a Tracer that records what the routed experts take in.
type Calibrator interface {
	// Calibrate runs every layer the tracer can run and returns each
	// one's ExpertAmax, in layer order.
	Calibrate(ctx context.Context) ([]ExpertAmax, error)
}

// Run is what the core reads of one layer forward.
type Run[S any] struct {
	Layer       int
	Next        S // the state leaving the layer
	Load, Total time.Duration
	Note        []any // more fields for the forward's log line
}

// ActivationRows is where ReadActivation finds an activation's values:
// F32, I32 or Mask (written as U8 0/1), rows of the whole batch counted
// from the prompt's first token, or of the prompt alone when Own is set.
type ActivationRows struct {
	F32  []float32
	I32  []int32
	Mask []bool
	Own  bool
}

// Core runs prompts through a model's layers on demand and memoises the
// results: the state entering every computed layer (so layer N needs only
// the layers not run yet), every layer's record, the full outputs of the
// most recent layers and the head's outputs. It is what every family's
// Tracer is made of, and it is safe for concurrent use; one forward runs
// at a time, and a forward stops when the context of every reader waiting
// for it has ended.
type Core[S, O, R, F any] struct {
	engine  Engine[S, O, F]
	spec    Spec[S, O, R, F]
	prompts []Prompt
	tok     *tokenizer.Tokenizer
	log     *slog.Logger
	seqs    [][]int
	tokens  int

	// sem holds the right to compute and to touch the memo below.
	sem       chan struct{}
	states    []*S // states[l] enters layer l (nil until computed); states[Runnable] leaves the last
	records   []*R
	experts   []*ExpertAmax // per layer, once run, where the family records them
	recent    []*O
	final     *F
	embedTime time.Duration

	started  bool // Spec.Started was called; under sem
	forwards atomic.Int64
}

// NewCore returns the core of a trace of prompts (already encoded) through
// e as spec describes; tok may be nil (token pieces are then null), log
// receives a line per layer forward.
func NewCore[S, O, R, F any](e Engine[S, O, F], spec Spec[S, O, R, F], prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *Core[S, O, R, F] {
	c := &Core[S, O, R, F]{engine: e, spec: spec, prompts: prompts, tok: tok, log: log,
		sem:     make(chan struct{}, 1),
		states:  make([]*S, spec.Runnable+1),
		records: make([]*R, spec.Runnable),
		experts: make([]*ExpertAmax, spec.Runnable),
	}
	for _, p := range prompts {
		c.seqs = append(c.seqs, p.TokenIDs)
		c.tokens += len(p.TokenIDs)
	}
	return c
}

// Layers is the number of layers the tracer can run.
func (c *Core[S, O, R, F]) Layers() int { return len(c.records) }

// Forwards is the number of layer forwards run so far.
func (c *Core[S, O, R, F]) Forwards() int64 { return c.forwards.Load() }

// BackendName is what the layers run on.
func (c *Core[S, O, R, F]) BackendName() string { return c.spec.Backend }

// Prompts are the prompts traced, encoded.
func (c *Core[S, O, R, F]) Prompts() []Prompt { return c.prompts }

// Tokenizer is the tokenizer the prompts were encoded with, or nil.
func (c *Core[S, O, R, F]) Tokenizer() *tokenizer.Tokenizer { return c.tok }

// Seqs are the prompts' token ids.
func (c *Core[S, O, R, F]) Seqs() [][]int { return c.seqs }

// Tokens is the number of tokens of every prompt together.
func (c *Core[S, O, R, F]) Tokens() int { return c.tokens }

// EmbedTime is how long looking up the embedding rows took.
func (c *Core[S, O, R, F]) EmbedTime() time.Duration { return c.embedTime }

// Stats are the live counters .dsfs/stats.json shows.
func (c *Core[S, O, R, F]) Stats() map[string]any {
	return map[string]any{"layer_forwards": c.Forwards(), "backend": c.BackendName()}
}

// Cost estimates what tracing the prompts holds.
func (c *Core[S, O, R, F]) Cost() Cost {
	lens := make([]int, len(c.seqs))
	longest := 0
	for i, s := range c.seqs {
		lens[i] = len(s)
		longest = max(longest, len(s))
	}
	tensors := 0
	for l := range c.Layers() {
		n := 0
		c.spec.Tensors(l, int64(longest), func(string, safetensors.DType, ...int64) { n++ })
		tensors = max(tensors, n)
	}
	return c.spec.Cost(lens, tensors)
}

func (c *Core[S, O, R, F]) lock(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Core[S, O, R, F]) unlock() { <-c.sem }

// Layer returns layer l's outputs and record, running whatever layers up
// to l have not run yet. If ctx ends first, the layers finished so far
// stay memoised.
func (c *Core[S, O, R, F]) Layer(ctx context.Context, l int) (*O, *R, error) {
	if l < 0 || l >= c.Layers() {
		return nil, nil, fmt.Errorf("layer %d is not traceable (layers 0-%d are)", l, c.Layers()-1)
	}
	if err := c.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer c.unlock()
	return c.layer(ctx, l)
}

// Record returns layer l's record, running the layer if it has none yet.
func (c *Core[S, O, R, F]) Record(ctx context.Context, l int) (*R, error) {
	if l >= 0 && l < c.Layers() {
		if err := c.lock(ctx); err != nil {
			return nil, err
		}
		r := c.records[l]
		c.unlock()
		if r != nil {
			return r, nil
		}
	}
	_, r, err := c.Layer(ctx, l)
	return r, err
}

// layer is Layer with the lock held.
func (c *Core[S, O, R, F]) layer(ctx context.Context, l int) (*O, *R, error) {
	for _, o := range c.recent {
		if c.spec.Run(o).Layer == l {
			return o, c.records[l], nil
		}
	}
	from := l
	for c.states[from] == nil && from > 0 {
		from--
	}
	if c.states[from] == nil {
		if err := c.embed(); err != nil {
			return nil, nil, err
		}
	}
	var out *O
	for j := from; j <= l; j++ {
		var err error
		if out, err = c.forward(ctx, j); err != nil {
			return nil, nil, err
		}
	}
	return out, c.records[l], nil
}

// embed looks up the prompts' embedding rows; the caller holds the lock.
func (c *Core[S, O, R, F]) embed() error {
	if !c.started {
		c.started = true
		if c.spec.Started != nil {
			c.spec.Started(c.Cost())
		}
	}
	start := time.Now()
	var ids []int
	for _, s := range c.seqs {
		ids = append(ids, s...)
	}
	e, err := c.engine.EmbedRows(ids)
	if err != nil {
		return err
	}
	s := c.spec.Start(e)
	c.states[0] = &s
	c.embedTime = time.Since(start)
	return nil
}

// forward runs layer j on its memoised input; the caller holds the lock.
func (c *Core[S, O, R, F]) forward(ctx context.Context, j int) (*O, error) {
	in := *c.states[j]
	out, err := c.engine.Forward(ctx, j, in)
	if err != nil {
		return nil, err
	}
	c.forwards.Add(1)
	run := c.spec.Run(out)
	if c.log != nil {
		args := []any{"layer", j, "tokens", c.tokens, "backend", c.spec.Backend}
		args = append(args, run.Note...)
		args = append(args, "ms", run.Total.Milliseconds(), "load_ms", run.Load.Milliseconds())
		c.log.Info("trace: layer forward", args...)
	}
	c.states[j+1] = &run.Next
	if c.records[j] == nil {
		c.records[j] = c.spec.Record(in, out)
	}
	if c.spec.Experts != nil && c.experts[j] == nil {
		in, mid := c.spec.Experts(out)
		c.experts[j] = &ExpertAmax{Layer: j, In: in, Mid: mid}
	}
	c.recent = append(c.recent, out)
	if len(c.recent) > recentOutputs {
		c.recent = c.recent[1:]
	}
	return out, nil
}

// Input and Output are the states entering the first layer and leaving
// the last runnable one, once computed: the first is computed if no layer
// can run (so that trace.json still describes the prompts' embedding).
func (c *Core[S, O, R, F]) Input(ctx context.Context) (first, last *S, err error) {
	if err := c.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer c.unlock()
	if c.states[0] == nil {
		if err := c.embed(); err != nil {
			return nil, nil, err
		}
	}
	return c.states[0], c.states[len(c.states)-1], nil
}

// Final returns the head's outputs, running every layer first. It fails
// when some layer cannot run.
func (c *Core[S, O, R, F]) Final(ctx context.Context) (*F, error) {
	if c.Layers() < c.spec.Layers {
		return nil, fmt.Errorf("the logits need every layer; layer %d cannot run", c.Layers())
	}
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	defer c.unlock()
	if c.final != nil {
		return c.final, nil
	}
	last := c.Layers() - 1
	if c.states[last+1] == nil {
		if _, _, err := c.layer(ctx, last); err != nil {
			return nil, err
		}
	}
	f, err := c.engine.Logits(ctx, *c.states[last+1])
	if err != nil {
		return nil, err
	}
	c.final = f
	return f, nil
}

// RunAll runs every layer the tracer can run that has no record yet, so
// that every record and the state leaving the last layer are memoised.
func (c *Core[S, O, R, F]) RunAll(ctx context.Context) error {
	for l := range c.Layers() {
		if _, err := c.Record(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

// Records is the layer records made so far, one per runnable layer (nil
// where a layer has not run).
func (c *Core[S, O, R, F]) Records(ctx context.Context) ([]*R, error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	defer c.unlock()
	return slices.Clone(c.records), nil
}

// Routing returns layer l's routes, nil for a layer that routes nothing,
// running the layer if it has no record yet.
func (c *Core[S, O, R, F]) Routing(ctx context.Context, l int) (*RoutingTrace, error) {
	r, err := c.Record(ctx, l)
	if err != nil {
		return nil, err
	}
	return c.spec.Routing(r), nil
}

// Calibrate implements Calibrator: it fails for a family whose engine
// records nothing of its experts.
func (c *Core[S, O, R, F]) Calibrate(ctx context.Context) ([]ExpertAmax, error) {
	if c.spec.Experts == nil {
		return nil, errors.New("this family's engine records no expert activations")
	}
	if err := c.RunAll(ctx); err != nil {
		return nil, err
	}
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	defer c.unlock()
	out := make([]ExpertAmax, 0, len(c.experts))
	for _, e := range c.experts {
		if e != nil { // a dense layer's forward records none
			out = append(out, *e)
		}
	}
	return out, nil
}

// LayerTensors counts layer l's tensors in the checkpoint.
func (c *Core[S, O, R, F]) LayerTensors(l int) (tensors int, elements, bytes int64) {
	return c.engine.LayerTensors(l)
}

// PromptsJSON is prompts.json: the prompts with their token ids and
// tokens.
func (c *Core[S, O, R, F]) PromptsJSON() ([]byte, error) { return encode(c.prompts) }

// LayerJSON is layers/NN.json: layer l's record, running the layer if
// needed.
func (c *Core[S, O, R, F]) LayerJSON(ctx context.Context, l int) ([]byte, error) {
	r, err := c.Record(ctx, l)
	if err != nil {
		return nil, err
	}
	return encode(r)
}

// TraceJSON is trace.json: the family's Report of the whole trace, every
// layer's record included.
func (c *Core[S, O, R, F]) TraceJSON(ctx context.Context) ([]byte, error) {
	d, err := c.spec.Report(ctx, c)
	if err != nil {
		return nil, err
	}
	return encode(d)
}

// Activations lists layer l's tensors, per prompt in prompt order.
func (c *Core[S, O, R, F]) Activations(l int) []Activation {
	var out []Activation
	for pi, p := range c.prompts {
		add := func(kind string, dt safetensors.DType, shape ...int64) {
			out = append(out, Activation{Name: p.ID + "." + kind, DType: dt, Shape: shape, Prompt: pi, Kind: kind})
		}
		c.spec.Tensors(l, int64(len(p.TokenIDs)), add)
	}
	return out
}

// LogitActivations lists logits.safetensors: <id>.logits [T, vocab]; none
// for a family whose trace serves no logits.
func (c *Core[S, O, R, F]) LogitActivations() []Activation {
	if c.spec.Logits == nil {
		return nil
	}
	var out []Activation
	for pi, p := range c.prompts {
		out = append(out, Activation{Name: p.ID + ".logits", DType: safetensors.F32,
			Shape: []int64{int64(len(p.TokenIDs)), int64(c.spec.Vocab)}, Prompt: pi, Kind: "logits"})
	}
	return out
}

// ReadActivation writes rows [r0, r1) of activation a (of layer l; -1 for
// the logits) into dst as little-endian values, running what it needs.
func (c *Core[S, O, R, F]) ReadActivation(ctx context.Context, l int, a Activation, r0, r1 int, dst []byte) error {
	if int64(len(dst)) != int64(r1-r0)*a.RowBytes() || r0 < 0 || r1 > a.Rows() {
		return fmt.Errorf("%s: rows [%d, %d) into %d bytes", a.Name, r0, r1, len(dst))
	}
	w := int(a.RowBytes() / int64(a.DType.Bits()/8))
	var src ActivationRows
	if a.Kind == "logits" {
		f, err := c.Final(ctx)
		if err != nil {
			return err
		}
		src.F32 = c.spec.Logits(f)
	} else {
		out, _, err := c.Layer(ctx, l)
		if err != nil {
			return err
		}
		if src, err = c.spec.Rows(out, a); err != nil {
			return err
		}
	}
	row := 0
	if !src.Own {
		for _, s := range c.seqs[:a.Prompt] {
			row += len(s)
		}
	}
	switch {
	case src.Mask != nil:
		for i, keep := range src.Mask[(row+r0)*w : (row+r1)*w] {
			dst[i] = 0
			if keep {
				dst[i] = 1
			}
		}
	case src.I32 != nil:
		for i, v := range src.I32[(row+r0)*w : (row+r1)*w] {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
	default:
		for i, v := range src.F32[(row+r0)*w : (row+r1)*w] {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	}
	return nil
}

// Environment is trace.json's environment on a host backend named
// backend running on device.
func HostEnvironment(backend, device string) Environment {
	return Environment{
		Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUThreads: runtime.GOMAXPROCS(0), Backend: backend, Device: device,
		MatmulKernel: simd.Kernel(), ComputeDType: "float32",
	}
}

// CapturedAt is trace.json's captured_at_utc.
func CapturedAt() string { return time.Now().UTC().Format(time.RFC3339) }

// Activation is one tensor of a layers/NN.safetensors or of
// logits.safetensors: [rows, ...] of one prompt.
type Activation struct {
	Name   string // <prompt id>.<kind>
	DType  safetensors.DType
	Shape  []int64
	Prompt int    // index into the prompts
	Kind   string // what it holds: attn_out, topk_ids, logits, ...
}

// Rows is the first dimension.
func (a Activation) Rows() int { return int(a.Shape[0]) }

// RowBytes is the size of one row.
func (a Activation) RowBytes() int64 {
	n := int64(a.DType.Bits() / 8)
	for _, d := range a.Shape[1:] {
		n *= d
	}
	return n
}

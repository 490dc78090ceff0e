package trace

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// recentOutputs is how many layers' full activations a Tracer keeps: the
// layer being read and the one before, so that reading layer N's files in
// any order runs its forward once, while memory stays at a few layers'
// activations whatever the model's depth.
const recentOutputs = 2

// Tracer runs prompts through a model's layers on demand and memoises the
// results: the residual stream entering every computed layer (so layer N
// needs only the layers not run yet), every layer's record, and the full
// activations of the most recent layers. It is safe for concurrent use;
// one forward runs at a time.
type Tracer struct {
	model   *deepseek2.Model
	backend backend.Backend
	prompts []Prompt
	tok     *tokenizer.Tokenizer
	log     *slog.Logger

	lens   []int
	tokens int

	// sem holds the right to compute and to touch the memo below.
	sem chan struct{}
	// hidden[l] is the residual stream entering layer l; hidden[0] is the
	// embedding.
	hidden    [][]float32
	records   []*LayerRecord
	recent    []*deepseek2.Output // most recent last
	embedTime time.Duration

	forwards atomic.Int64
}

// New returns a tracer of prompts (already encoded, see Encode) through m
// on b. tok may be nil (token pieces are then null); log receives a line
// per layer forward.
func New(m *deepseek2.Model, b backend.Backend, prompts []Prompt, tok *tokenizer.Tokenizer, log *slog.Logger) *Tracer {
	t := &Tracer{
		model: m, backend: b, prompts: prompts, tok: tok, log: log,
		sem:     make(chan struct{}, 1),
		hidden:  make([][]float32, m.Runnable()+1),
		records: make([]*LayerRecord, m.Runnable()),
	}
	for _, p := range prompts {
		t.lens = append(t.lens, len(p.TokenIDs))
		t.tokens += len(p.TokenIDs)
	}
	return t
}

// Layers is the number of layers the tracer can run: those before the
// first layer with a problem.
func (t *Tracer) Layers() int { return len(t.records) }

// Forwards is the number of layer forwards run so far.
func (t *Tracer) Forwards() int64 { return t.forwards.Load() }

// lock takes the right to compute, or gives up when ctx is done.
func (t *Tracer) lock(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Tracer) unlock() { <-t.sem }

// Layer returns layer l's activations and record, running whatever
// layers up to l have not run yet. If ctx ends first, the layers finished
// so far stay memoised.
func (t *Tracer) Layer(ctx context.Context, l int) (*deepseek2.Output, *LayerRecord, error) {
	if l < 0 || l >= t.Layers() {
		return nil, nil, fmt.Errorf("layer %d is not traceable (layers 0-%d are)", l, t.Layers()-1)
	}
	if err := t.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer t.unlock()
	for _, o := range t.recent {
		if o.Layer == l {
			return o, t.records[l], nil
		}
	}
	// The deepest memoised input at or below l.
	from := l
	for t.hidden[from] == nil && from > 0 {
		from--
	}
	if t.hidden[from] == nil {
		if err := t.embed(); err != nil {
			return nil, nil, err
		}
	}
	var out *deepseek2.Output
	for j := from; j <= l; j++ {
		var err error
		if out, err = t.forward(ctx, j); err != nil {
			return nil, nil, err
		}
	}
	return out, t.records[l], nil
}

// Record returns layer l's record, running the layer if needed.
func (t *Tracer) Record(ctx context.Context, l int) (*LayerRecord, error) {
	if l >= 0 && l < t.Layers() {
		if err := t.lock(ctx); err != nil {
			return nil, err
		}
		r := t.records[l]
		t.unlock()
		if r != nil {
			return r, nil
		}
	}
	_, r, err := t.Layer(ctx, l)
	return r, err
}

// embed looks up the prompts' embedding rows; the caller holds the lock.
func (t *Tracer) embed() error {
	start := time.Now()
	var ids []int
	for _, p := range t.prompts {
		ids = append(ids, p.TokenIDs...)
	}
	h, err := t.model.EmbedRows(ids)
	if err != nil {
		return err
	}
	t.hidden[0] = h
	t.embedTime = time.Since(start)
	return nil
}

// forward runs layer j on its memoised input; the caller holds the lock.
func (t *Tracer) forward(ctx context.Context, j int) (*deepseek2.Output, error) {
	in := t.hidden[j]
	out, err := t.model.Forward(ctx, t.backend, j, in, t.lens)
	if err != nil {
		return nil, err
	}
	t.forwards.Add(1)
	if t.log != nil {
		t.log.Info("trace: layer forward", "layer", j, "tokens", t.tokens, "backend", t.backend.Name(),
			"ms", out.Time.Milliseconds(), "load_ms", out.LoadTime.Milliseconds(), "weight_mib", out.WeightBytes>>20)
	}
	t.hidden[j+1] = out.HiddenOut
	if t.records[j] == nil {
		t.records[j] = t.record(j, in, out)
	}
	t.recent = append(t.recent, out)
	if len(t.recent) > recentOutputs {
		t.recent = t.recent[1:]
	}
	return out, nil
}

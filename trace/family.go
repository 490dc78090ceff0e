package trace

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/backend"
)

// A Family runs the layers of one model family: it opens a checkpoint's
// model (config, then the layers' tensors), and a Model traces prompts
// through it (forward after forward, each recording routes and
// activations). Each family is a package of its own that registers itself
// with Register for the checkpoint families it runs; trace/ finds it by
// checkpoint.Config.Family.
type Family interface {
	// Open opens the model of cat, whose tokenizer (nil if it has none)
	// the prompts are encoded with. A model the engine cannot run gives an
	// *Unsupported error; a checkpoint that cannot be read as the family's
	// gives another error.
	Open(cat *checkpoint.Catalog, tok *tokenizer.Tokenizer) (Model, error)
}

// A Model is a checkpoint's model opened by its Family.
type Model interface {
	// Vocab is the size of the vocabulary the prompts' ids index.
	Vocab() int
	// Layers is the number of decoder layers in the config.
	Layers() int
	// Problems are what keeps layers (or the head) from running, one line
	// each ("layer 5: ...", "head: ...").
	Problems() []string
	// Trace returns the tracer of prompts (already encoded with Encode).
	Trace(prompts []Prompt, opt Options) (Tracer, error)
}

// Options are how a Model traces prompts.
type Options struct {
	// Backend is what the layers' operations run on (see backend.Start);
	// a family whose host engine runs better than the CPU backend runs a
	// *backend.CPU on its own engine.
	Backend backend.Backend
	// Precision is --trace-precision: "a8" (FP8 activations into FP8 and
	// FP4 linears, as DeepSeek's reference runs V4) or "fp32"; families
	// without quantised activations ignore it.
	Precision string
	// Tokenizer spells the prompts' tokens in the records; nil writes
	// null.
	Tokenizer *tokenizer.Tokenizer
	// Log receives a line per layer forward.
	Log *slog.Logger
	// Started, when set, is called once, before the tracer first computes,
	// with its Cost: from then on it holds up to that, which the caller may
	// now count (a mount raises its memory limit then, not while nothing
	// reads trace/).
	Started func(Cost)
}

// A Tracer runs prompts through a model's layers when its files are read
// and serves what they record (see Files).
type Tracer interface {
	// Layers is the number of layers the tracer can run.
	Layers() int
	// Cost estimates what tracing the prompts holds (see Within).
	Cost() Cost
	// Stats are the live counters .dsfs/stats.json shows.
	Stats() map[string]any

	// Prompts are the prompts traced, encoded.
	Prompts() []Prompt
	// Routing returns layer l's routes (nil for a layer that routes
	// nothing), running what it needs.
	Routing(ctx context.Context, l int) (*RoutingTrace, error)

	PromptsJSON() ([]byte, error)
	TraceJSON(ctx context.Context) ([]byte, error)
	LayerJSON(ctx context.Context, l int) ([]byte, error)
	Activations(l int) []Activation
	LogitActivations() []Activation
	ReadActivation(ctx context.Context, l int, a Activation, r0, r1 int, dst []byte) error
}

// Unsupported is the error of a model whose engine cannot run it: What is
// the model as config.json names it, Missing what the engine would need,
// one line each.
type Unsupported struct {
	What    string
	Missing []string
}

func (e *Unsupported) Error() string {
	return fmt.Sprintf("cannot run %s: the engine lacks %s", e.What, strings.Join(e.Missing, "; "))
}

var (
	familiesMu sync.RWMutex
	families   = make(map[checkpoint.Family]Family)
)

// Register makes f the family that traces checkpoints of family c. A
// family package calls it from its init; a program that traces imports
// the family packages it wants (for their effect, as image formats are).
func Register(c checkpoint.Family, f Family) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if _, dup := families[c]; dup {
		panic(fmt.Sprintf("trace: family %q registered twice", c))
	}
	families[c] = f
}

// Lookup returns the family registered for c, or nil.
func Lookup(c checkpoint.Family) Family {
	familiesMu.RLock()
	defer familiesMu.RUnlock()
	return families[c]
}

// Registered lists the checkpoint families that have a Family, sorted.
func Registered() []checkpoint.Family {
	familiesMu.RLock()
	defer familiesMu.RUnlock()
	out := make([]checkpoint.Family, 0, len(families))
	for c := range families {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

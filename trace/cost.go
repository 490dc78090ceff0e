package trace

import "fmt"

// Cost is the memory a trace of a set of prompts holds outside the block
// cache, in bytes, by what holds it. It is an upper estimate made from the
// model's shapes and the prompts' lengths before anything runs, so that a
// set of prompts too costly for the machine is refused at mount rather
// than found out at the first read. Token limits alone do not bound it:
// some parts grow with the number of prompts (each prompt's tensors and
// routing record), one with its square (the record compares every pair of
// prompts), and attention with the square of a prompt's length.
type Cost struct {
	// States are the states entering every runnable layer, kept so that a
	// layer runs from the nearest computed one.
	States int64 `json:"states"`
	// Outputs are the full outputs of the most recent layers (two) and,
	// where the head runs, the logits.
	Outputs int64 `json:"outputs"`
	// Forward is one layer forward's scratch: decoded weight matrices,
	// projections, attention scores and expert buffers.
	Forward int64 `json:"forward"`
	// Records are every layer's routing record, as kept and as served in
	// layers/NN.json and trace.json.
	Records int64 `json:"records"`
	// Layouts are the layer files' headers, laid out at mount.
	Layouts int64 `json:"layouts"`
}

// Total is the sum of the parts.
func (c Cost) Total() int64 { return c.States + c.Outputs + c.Forward + c.Records + c.Layouts }

// String gives the total and its parts in MiB.
func (c Cost) String() string {
	mib := func(n int64) int64 { return (n + 1<<20 - 1) >> 20 }
	return fmt.Sprintf("%d MiB (states %d, outputs %d, forward %d, records %d, layouts %d)",
		mib(c.Total()), mib(c.States), mib(c.Outputs), mib(c.Forward), mib(c.Records), mib(c.Layouts))
}

// DefaultMemoryMiB is the default of --trace-memory-mb: the memory a
// trace may hold outside the block cache. The default prompts cost a few
// hundred MiB on DeepSeek-V3 and V4-Flash; tracing a full 8192 tokens of
// them costs tens of GiB (the kept states alone: 61 layers x 8192 tokens x
// 7168 x 4 bytes is 14 GiB on V3), which a user gives explicitly.
const DefaultMemoryMiB = 4096

// Figures of the estimate, measured on the synthesised presets with
// margin: what a record holds per token route (TokenRoute, its experts and
// spellings), per prompt (PromptRouting with its load of every expert)
// and per pair of prompts (PairJaccard with two ids), and what a layer
// file's layout holds per tensor (name, header entry, blocks).
const (
	recordPerToken  = 256
	recordPerRoute  = 48 // per selected expert of a token
	recordPerPrompt = 1024
	recordPerExpert = 16 // per expert of a prompt's load
	recordPerPair   = 384
	// recordCopies counts the record itself, layers/NN.json, trace.json
	// and the encoder's buffer as it grows.
	recordCopies    = 4
	layoutPerTensor = 1024
	// weightScratch is what a forward holds of decoded weights: up to
	// three float32 matrices, V3's largest being about 150 MB.
	weightScratch = 512 << 20
)

// CostModel is what a family's trace holds per token and per prompt,
// from which Cost estimates a set of prompts' cost.
type CostModel struct {
	Layers int // runnable layers: each keeps a state and a record
	// State is the bytes per token of the state entering a layer;
	// Output those of one layer's outputs (activations and what the
	// engine keeps beside them); Work those of a forward's scratch.
	State, Output, Work int64
	// Final is the bytes per token of what the head's run keeps (the
	// logits over the vocabulary); 0 where no head runs.
	Final int64
	// Quadratic is the bytes per token² of one prompt that an output and
	// a forward hold (scores and masks over a prompt's positions).
	Quadratic int64
	// Experts and TopK shape the routing records (0: no routed experts).
	Experts, TopK int
	// Tensors is the number of tensors per prompt in one layer file.
	Tensors int
}

// Cost estimates the memory a trace of prompts of lens tokens holds.
func (m CostModel) Cost(lens []int) Cost {
	var tokens, square, longest int64
	for _, n := range lens {
		tokens += int64(n)
		square += int64(n) * int64(n)
		longest = max(longest, int64(n))
	}
	prompts := int64(len(lens))
	layers := int64(m.Layers)
	c := Cost{
		States:  (layers + 1) * tokens * m.State,
		Outputs: recentOutputs*(tokens*m.Output+square*m.Quadratic) + tokens*m.Final,
		Forward: weightScratch + tokens*m.Work + longest*longest*m.Quadratic,
		Layouts: layers * prompts * int64(m.Tensors) * layoutPerTensor,
	}
	if m.Experts > 0 {
		perLayer := tokens*(recordPerToken+recordPerRoute*int64(m.TopK)) +
			prompts*(recordPerPrompt+recordPerExpert*int64(m.Experts)) +
			prompts*(prompts-1)/2*recordPerPair
		c.Records = recordCopies * layers * perLayer
	}
	return c
}

// BudgetError is the refusal of prompts whose trace would cost more than
// the budget.
type BudgetError struct {
	Prompts, Tokens int
	Cost            Cost
	Budget          int64 // bytes
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%d prompts of %d tokens would hold about %s, more than the %d MiB of --trace-memory-mb: trace fewer or shorter prompts, or raise it",
		e.Prompts, e.Tokens, e.Cost, e.Budget>>20)
}

// Within returns a *BudgetError unless c, the cost of tracing prompts, is
// at most budget bytes.
func Within(c Cost, prompts []Prompt, budget int64) error {
	if c.Total() <= budget {
		return nil
	}
	tokens := 0
	for _, p := range prompts {
		tokens += len(p.TokenIDs)
	}
	return &BudgetError{Prompts: len(prompts), Tokens: tokens, Cost: c, Budget: budget}
}

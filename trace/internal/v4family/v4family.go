// Package v4family holds what the trace families of DeepSeek-V4 (package
// deepseek4) and V4.1 (package deepseek41) share beyond their engine
// (package v4): the parts of a layer record both write (LayerRun, the
// hyper-connection statistics, keys attended and indexer picks), the
// tensors every V4 layer file holds, the cost model, the environment
// record and the --trace-precision and --device choices.
package v4family

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

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
		LoadCPU trace.Num `json:"load_cpu"`
		Forward trace.Num `json:"forward"`
	} `json:"timing_ms"`
	RoutedExpertsRun int               `json:"routed_experts_run"`
	StateTensors     int               `json:"state_tensors"`
	StateNumel       int64             `json:"state_numel"`
	StateBytes       int64             `json:"state_bytes"`
	WeightBytesRead  int64             `json:"weight_bytes_read"`
	StreamBefore     trace.HiddenStats `json:"stream_before"`
	StreamAfter      trace.HiddenStats `json:"stream_after"`
	AttnOut          trace.HiddenStats `json:"attn_out"`
	FFNOut           trace.HiddenStats `json:"ffn_out"`
}

// Layer is what a family's record reads of one layer forward: the
// layer, its timing, the routed experts it ran, the checkpoint bytes it
// read, the streams leaving it [tokens, hc, D] and the sublayer outputs
// [tokens, D] before the hc expand.
type Layer struct {
	Layer           int
	Load, Total     time.Duration
	Experts         int
	WeightBytes     int64
	StreamOut       []float32
	AttnOut, FFNOut []float32
}

// RunOf is the LayerRun of forward out, run at precision p from the
// streams before [tokens, hc, D], of a model of hidden size d whose layer
// tensors tensors counts.
func RunOf(p v4.Precision, d int, before []float32, out Layer, tensors func(l int) (int, int64, int64)) LayerRun {
	r := LayerRun{Precision: string(p), RoutedExpertsRun: out.Experts, WeightBytesRead: out.WeightBytes,
		StreamBefore: trace.HiddenOf(before, d), StreamAfter: trace.HiddenOf(out.StreamOut, d),
		AttnOut: trace.HiddenOf(out.AttnOut, d), FFNOut: trace.HiddenOf(out.FFNOut, d)}
	r.StateTensors, r.StateNumel, r.StateBytes = tensors(out.Layer)
	r.TimingMS.LoadCPU = trace.Num(out.Load.Seconds() * 1000)
	r.TimingMS.Forward = trace.Num(out.Total.Seconds() * 1000)
	return r
}

// Tensors lists a prompt of T tokens' tensors of a V4-family layer:
// stream_out [T, hc, D], attn_out and ffn_out [T, D], what the family
// adds (own), then topk_ids and topk_weights [T, experts per token].
func Tensors(cfg *v4.Config, T int64, add func(kind string, dt safetensors.DType, shape ...int64), own func()) {
	add("stream_out", safetensors.F32, T, int64(cfg.HCMult), int64(cfg.Hidden))
	add("attn_out", safetensors.F32, T, int64(cfg.Hidden))
	add("ffn_out", safetensors.F32, T, int64(cfg.Hidden))
	own()
	add("topk_ids", safetensors.I32, T, int64(cfg.TopK))
	add("topk_weights", safetensors.F32, T, int64(cfg.TopK))
}

// Cost estimates what tracing prompts of lens tokens through a V4-family
// model of cfg holds, with runnable layers and tensors per prompt in a
// layer file.
func Cost(cfg *v4.Config, runnable, tensors int, lens []int) trace.Cost {
	c := cfg
	d, hc := int64(c.Hidden), int64(c.HCMult)
	return trace.CostModel{
		Layers: runnable,
		// The streams, V4.1's pre_mix, and its compressed KV carried
		// between layers (at most a row of head_dim a token).
		State:  4 * (hc*d + hc + int64(c.HeadDim)),
		Output: 4 * 2 * (hc*d + 2*d + 2*int64(c.TopK) + int64(c.IndexTopK) + int64(c.HeadDim)),
		Work: 4 * (3*int64(c.Heads)*int64(c.HeadDim) + int64(c.QLoRA) + int64(c.OGroups)*int64(c.OLoRA) +
			int64(c.IndexHeads)*int64(c.IndexDim) + 3*int64(c.TopK)*int64(c.MoEInter) + 4*hc*d),
		// Index scores over compressed positions (ratio 4 at least) and
		// V4.1's candidate masks: [T, T/ratio] of a prompt.
		Quadratic: 4,
		Final:     4 * (int64(c.Vocab) + hc*d),
		Experts:   c.RoutedExperts,
		TopK:      c.TopK,
		Tensors:   tensors,
	}.Cost(lens)
}

// Environment is trace.json's environment of a V4-family trace whose
// products (and ops, the family's own operations) run on b, nil for the
// host engine.
func Environment(b backend.Backend, ops string) trace.Environment {
	if b == nil {
		return trace.HostEnvironment("cpu", "host (pure Go V4 engine)")
	}
	return trace.HostEnvironment(b.Name(), b.Device()+" (products and "+ops+" operations; the rest on the host V4 engine)")
}

// Precision reads --trace-precision: a8 (the default) or fp32.
func Precision(p string) (v4.Precision, error) {
	switch p {
	case "", "a8":
		return v4.A8, nil
	case "fp32":
		return v4.FP32, nil
	}
	return "", fmt.Errorf("--trace-precision: %q is not a8 or fp32", p)
}

// Engine is the backend a V4-family model runs on for b, from
// backend.Start: nil (its own host engine, which decodes FP8 and FP4
// weights inside the products) for the CPU, b otherwise.
func Engine(b backend.Backend) backend.Backend {
	if _, cpu := b.(*backend.CPU); cpu || b == nil {
		return nil
	}
	return b
}

// Name is what a V4-family model's layers run on, for the log and stats.
func Name(b backend.Backend) string {
	if b == nil {
		return "cpu"
	}
	return b.Name()
}

// HCStats describes one hyper-connection site's coefficients over every
// token.
type HCStats struct {
	Pre  trace.Spread `json:"pre"`
	Post trace.Spread `json:"post"`
	// CombDiagonal is comb[j, j] (a stream kept in place), CombOffDiagonal
	// the mixing between streams.
	CombDiagonal    trace.Spread `json:"comb_diagonal"`
	CombOffDiagonal trace.Spread `json:"comb_off_diagonal"`
}

// HCStatsOf describes h, a site of hc_mult n.
func HCStatsOf(h v4.HC, n int) HCStats {
	var diag, off []float64
	for i, v := range h.Comb {
		if j, k := i/n%n, i%n; j == k {
			diag = append(diag, float64(v))
		} else {
			off = append(off, float64(v))
		}
	}
	return HCStats{Pre: trace.SpreadOf(trace.Float64s(h.Pre), true), Post: trace.SpreadOf(trace.Float64s(h.Post), true), CombDiagonal: trace.SpreadOf(diag, true), CombOffDiagonal: trace.SpreadOf(off, true)}
}

// PromptKeys counts the keys one prompt's queries attended, summed over
// its tokens: window rows and compressed entries.
type PromptKeys struct {
	ID                string `json:"id"`
	Window            int    `json:"window"`
	Compressed        int    `json:"compressed"`
	CompressedEntries int    `json:"compressed_entries"`
}

// PromptKeysOf counts topk [T, k]: per query the first window slots (of
// the first nw valid) are window rows, the rest compressed entries; -1
// is none.
func PromptKeysOf(id string, topk []int32, k, nw, entries int) PromptKeys {
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
	Margin trace.Spread   `json:"margin"`
	Tokens []IndexerPicks `json:"tokens"`
}

// IndexerPicks is one query's compressed positions, ascending, and its
// margin: the k-th minus the (k+1)-th score (null when nothing was
// decided).
type IndexerPicks struct {
	Position int       `json:"position"`
	Picks    []int32   `json:"picks"`
	Margin   trace.Num `json:"margin"`
}

// PromptIndexerOf is one prompt's indexer record from its T queries'
// picks [T, k] and margins; picks maps one query's row to what is
// recorded.
func PromptIndexerOf(id string, T int, topk []int32, k int, margin []float32, picks func([]int32) []int32) PromptIndexer {
	px := PromptIndexer{ID: id}
	var margins []float64
	for pos := range T {
		m := float64(margin[pos])
		if !math.IsInf(m, 0) {
			margins = append(margins, m)
		}
		px.Tokens = append(px.Tokens, IndexerPicks{Position: pos, Picks: picks(topk[pos*k : (pos+1)*k]), Margin: trace.Num(m)})
	}
	px.Margin = trace.SpreadOf(margins, true)
	return px
}

// Routes is a V4 layer's routing as trace.Routing takes it.
func Routes(r v4.Routes) trace.Routes {
	return trace.Routes{K: r.K, IDs: r.IDs, Weights: r.Weights, Margin: r.Margin}
}

// AscendingPicks returns the valid picks of one query, ascending, then
// its -1 entries.
func AscendingPicks(p []int32) []int32 {
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

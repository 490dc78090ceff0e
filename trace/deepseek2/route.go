package deepseek2

import (
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/trace/backend"
	"math"
	"sort"
)

// Routes is the router's decision for a batch of tokens: for token t,
// IDs[t·K : (t+1)·K] are its experts in descending selection score (the
// order of DeepSeek's model.py) and Weights the matching combine weights.
type Routes struct {
	K       int
	IDs     []int32
	Weights []float32
	// Margin[t] is how far token t's decision is from a tie, in selection
	// score: the smaller of the k-th best minus the (k+1)-th best score
	// among experts of allowed groups and, with group limiting, the last
	// allowed group's score minus the next group's.
	Margin []float32
}

// weightRule is how the selected weights are normalised and scaled.
type weightRule int

const (
	// ruleHFV2 is HF's DeepSeek-V2 gate: with top_k > 1 and
	// norm_topk_prob, w / (Σw + 1e-20) and no scaling; else w · scale.
	ruleHFV2 weightRule = iota
	// ruleHFV3 is HF's DeepSeek-V3 gate: w / (Σw + 1e-20) when
	// norm_topk_prob, then always · scale.
	ruleHFV3
	// ruleModelPy is DeepSeek's model.py: softmax weights are never
	// renormalised, sigmoid weights always are (no epsilon); then · scale.
	ruleModelPy
)

// weightRule follows the HF file of the family (config.json comes with
// it), and model.py for a config without one (ModelArgs keys).
func (c *Config) weightRule() weightRule {
	switch c.Family {
	case checkpoint.DeepSeekV2:
		return ruleHFV2
	case checkpoint.DeepSeekV3:
		return ruleHFV3
	}
	return ruleModelPy
}

// route chooses the experts of each token from the router logits
// [tokens, E]; bias is the correction bias (nil without one).
func (c *Config) route(logits []float32, bias []float32) Routes {
	e := c.RoutedExperts
	k := c.TopK
	n := len(logits) / e
	r := Routes{K: k, IDs: make([]int32, n*k), Weights: make([]float32, n*k), Margin: make([]float32, n)}
	scores := make([]float32, e)
	sel := make([]float64, e)
	order := make([]int, e)
	for t := range n {
		c.score(scores, logits[t*e:(t+1)*e])
		for i, s := range scores {
			sel[i] = float64(s)
			if bias != nil {
				sel[i] = float64(s + bias[i]) // model.py adds in float32
			}
		}
		margin := c.limitGroups(sel)
		for i := range order {
			order[i] = i
		}
		// Descending score; equal scores keep the lower index first.
		sort.SliceStable(order, func(a, b int) bool { return sel[order[a]] > sel[order[b]] })
		if k < e && !math.IsInf(sel[order[k]], -1) {
			margin = math.Min(margin, sel[order[k-1]]-sel[order[k]])
		}
		r.Margin[t] = float32(margin)
		ids, w := r.IDs[t*k:(t+1)*k], r.Weights[t*k:(t+1)*k]
		for j := range k {
			ids[j] = int32(order[j])
			w[j] = scores[order[j]]
		}
		c.normalise(w)
	}
	return r
}

// score turns logits into router probabilities, in float32 as the
// reference does (softmax in float32, sigmoid).
func (c *Config) score(dst, logits []float32) {
	if c.ScoringFunc == ScoreSigmoid {
		for i, x := range logits {
			dst[i] = float32(1 / (1 + math.Exp(-float64(x))))
		}
		return
	}
	mx := float32(math.Inf(-1))
	for _, x := range logits {
		mx = max(mx, x)
	}
	var sum float64
	for i, x := range logits {
		v := math.Exp(float64(x - mx))
		dst[i] = float32(v)
		sum += v
	}
	for i := range dst {
		dst[i] = float32(float64(dst[i]) / sum)
	}
}

// limitGroups sets the scores of experts outside the topk_group best
// groups to -inf (model.py; HF's masked_fill(0.0) can pick a dropped
// expert when a biased score is negative) and returns the margin of the
// group choice (+inf when groups are not limited). A group scores its best
// expert (group_limited_greedy) or, with the correction bias (noaux_tc),
// the sum of its two best.
func (c *Config) limitGroups(sel []float64) float64 {
	g := c.Groups
	if g <= 1 || c.TopKMethod == TopKGreedy {
		return math.Inf(1)
	}
	per := len(sel) / g
	gs := make([]float64, g)
	for i := range g {
		grp := append([]float64(nil), sel[i*per:(i+1)*per]...)
		sort.Sort(sort.Reverse(sort.Float64Slice(grp)))
		gs[i] = grp[0]
		if c.TopKMethod == TopKNoAuxTC {
			gs[i] = grp[0] + grp[1]
		}
	}
	order := make([]int, g)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return gs[order[a]] > gs[order[b]] })
	margin := math.Inf(1)
	if c.TopKGroups < g {
		margin = gs[order[c.TopKGroups-1]] - gs[order[c.TopKGroups]]
	}
	for _, i := range order[c.TopKGroups:] {
		for j := i * per; j < (i+1)*per; j++ {
			sel[j] = math.Inf(-1)
		}
	}
	return margin
}

// normalise applies the config's weight rule to one token's weights.
func (c *Config) normalise(w []float32) {
	var sum float32
	for _, x := range w {
		sum += x
	}
	scale := float32(c.RoutedScale)
	switch c.weightRule() {
	case ruleHFV2:
		if c.TopK > 1 && c.NormTopKProb {
			for i := range w {
				w[i] /= sum + 1e-20
			}
			return
		}
	case ruleHFV3:
		if c.NormTopKProb {
			for i := range w {
				w[i] /= sum + 1e-20
			}
		}
	case ruleModelPy:
		if c.ScoringFunc == ScoreSigmoid {
			for i := range w {
				w[i] /= sum
			}
		}
	}
	for i := range w {
		w[i] *= scale
	}
}

// Router is implemented by backends that choose experts where the logits
// are, rather than have the model download them and route on the host:
// scores by cfg's scoring function (plus bias, the correction bias, when
// not nil), group-limited top-k, margins and normalised, scaled weights,
// as the host router does. It waits for the queued work and returns the
// first error since the last Sync.
type Router interface {
	Route(logits backend.Mat, bias backend.Buffer, cfg *Config) (Routes, error)
}

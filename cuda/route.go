package cuda

import (
	"fmt"
	"github.com/dsfs/dsfs/checkpoint"

	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// Limits of the route kernel's per-token arrays (route.cu).
const (
	maxExperts = 512
	maxGroups  = 64
)

// Group limiting and weight rules, as route.cu numbers them.
const (
	groupsNone = 0
	groupsMax  = 1
	groupsTop2 = 2

	ruleHFV2     = 0
	ruleHFV3     = 1
	ruleModelPy  = 2
	routeThreads = 128
)

// Route chooses the experts of every row of logits [tokens, experts] on
// the device, as deepseek2's router does on the host: scores by cfg's scoring
// function (plus bias, the correction bias, when not nil), group-limited
// top-k, the margin of each decision and the normalised, scaled weights,
// in the order of DeepSeek's model.py (descending selection score). It
// waits for the queued work and returns the first error since the last
// Sync.
func (b *Backend) Route(logits backend.Mat, bias backend.Buffer, cfg *deepseek2.Config) (deepseek2.Routes, error) {
	e, k, g := cfg.RoutedExperts, cfg.TopK, max(cfg.Groups, 1)
	if logits.Cols != e || e > maxExperts || k < 1 || k > e || g > maxGroups || e%g != 0 || g > 1 && (cfg.TopKGroups < 1 || cfg.TopKGroups > g) {
		panic(fmt.Sprintf("cuda: Route of %d logits per token for %d experts, top %d, %d groups (at most %d experts, %d groups)", logits.Cols, e, k, g, maxExperts, maxGroups))
	}
	var biasPtr uint64
	if bias != nil {
		if bias.Len() < e {
			panic(fmt.Sprintf("cuda: Route with a bias of %d values for %d experts", bias.Len(), e))
		}
		biasPtr = devBuffer(bias).ptr
	}
	groupMode := groupsNone
	if g > 1 && cfg.TopKMethod != deepseek2.TopKGreedy {
		groupMode = groupsMax
		if cfg.TopKMethod == deepseek2.TopKNoAuxTC {
			groupMode = groupsTop2
		}
	}
	// The weight rule follows the HF modeling file of the model type, and
	// DeepSeek's model.py without one, as model does.
	rule := ruleModelPy
	switch cfg.Family {
	case checkpoint.DeepSeekV2:
		rule = ruleHFV2
	case checkpoint.DeepSeekV3:
		rule = ruleHFV3
	}
	n := logits.Rows
	r := deepseek2.Routes{K: k, IDs: make([]int32, n*k), Weights: make([]float32, n*k), Margin: make([]float32, n)}
	lp := at(logits)
	defer b.enter()()
	if n == 0 {
		return r, b.takeErr()
	}
	ids, idsBytes := hostBytes(r.IDs)
	ws, wsBytes := hostBytes(r.Weights)
	ms, msBytes := hostBytes(r.Margin)
	dIDs, dW, dM := b.devAlloc(idsBytes), b.devAlloc(wsBytes), b.devAlloc(msBytes)
	defer b.devFree(dIDs, idsBytes)
	defer b.devFree(dW, wsBytes)
	defer b.devFree(dM, msBytes)
	b.launch(kRoute, (n+routeThreads-1)/routeThreads, routeThreads,
		lp, logits.Stride, n, biasPtr, e, k, g, cfg.TopKGroups, groupMode,
		boolInt(cfg.ScoringFunc == deepseek2.ScoreSigmoid), rule, boolInt(cfg.NormTopKProb), float32(cfg.RoutedScale),
		dIDs, dW, dM)
	if err := b.download(ids, dIDs, idsBytes); err != nil {
		return deepseek2.Routes{}, err
	}
	if err := b.download(ws, dW, wsBytes); err != nil {
		return deepseek2.Routes{}, err
	}
	if err := b.download(ms, dM, msBytes); err != nil {
		return deepseek2.Routes{}, err
	}
	return r, nil
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

package v4

import (
	"math"
	"sort"
	"time"
)

// Routes is the router's decision per token: IDs[t·K : (t+1)·K] are
// token t's experts in model.py's order (descending selection score, or
// tid2eid's order in hash layers) and Weights the matching combine
// weights, already normalised and times routed_scaling_factor.
type Routes struct {
	K       int
	IDs     []int32
	Weights []float32
	// Hash is set when the layer routes by token id.
	Hash bool
	// Scores [tokens, E] are the selection scores (score + bias) of a
	// learned router; nil for hash routing.
	Scores []float32
	// Margin[t] is the k-th minus the (k+1)-th selection score (+Inf for
	// hash routing, where nothing is decided by score).
	Margin []float32
}

// score applies the router's scoring function to one token's logits.
func (c *Config) score(dst, logits []float32) {
	switch c.ScoreFunc {
	case ScoreSigmoid:
		for i, x := range logits {
			dst[i] = sigmoid(x)
		}
	case ScoreSoftmax:
		mx := float32(math.Inf(-1))
		for _, x := range logits {
			mx = max(mx, x)
		}
		var sum float32
		for i, x := range logits {
			dst[i] = float32(math.Exp(float64(x - mx)))
			sum += dst[i]
		}
		for i := range dst {
			dst[i] /= sum
		}
	default:
		// sqrt(softplus(x)); torch's softplus returns x itself above 20.
		for i, x := range logits {
			sp := x
			if x <= 20 {
				sp = float32(math.Log1p(math.Exp(float64(x))))
			}
			dst[i] = float32(math.Sqrt(float64(sp)))
		}
	}
}

// route is model.py's Gate.forward: the bias shifts the selection only,
// the weights are the unbiased scores of the chosen experts, normalised
// (except for softmax) and scaled.
func (f *forward) route(x []float32, ids []int32) (Routes, error) {
	cfg, w := f.cfg, f.w
	e, k := cfg.RoutedExperts, cfg.TopK
	logits, err := f.mm(w.gate, x, f.n, false)
	if err != nil {
		return Routes{}, err
	}
	if f.v41 {
		for i := range logits {
			logits[i] /= f.gateTemp
		}
	}
	r := Routes{K: k, IDs: make([]int32, f.n*k), Weights: make([]float32, f.n*k), Margin: make([]float32, f.n), Hash: w.tid2eid != nil}
	if !r.Hash {
		r.Scores = make([]float32, f.n*e)
	}
	scores := make([]float32, e)
	order := make([]int, e)
	for t := range f.n {
		cfg.score(scores, logits[t*e:(t+1)*e])
		tid, tw := r.IDs[t*k:(t+1)*k], r.Weights[t*k:(t+1)*k]
		r.Margin[t] = float32(math.Inf(1))
		if r.Hash {
			copy(tid, w.tid2eid[int(ids[t])*k:(int(ids[t])+1)*k])
		} else {
			sel := r.Scores[t*e : (t+1)*e]
			for i, s := range scores {
				sel[i] = s + w.bias[i]
			}
			for i := range order {
				order[i] = i
			}
			// Descending score; equal scores keep the lower index first.
			sort.SliceStable(order, func(a, b int) bool { return sel[order[a]] > sel[order[b]] })
			for j := range k {
				tid[j] = int32(order[j])
			}
			if k < e {
				r.Margin[t] = sel[order[k-1]] - sel[order[k]]
			}
		}
		var sum float32
		for j, id := range tid {
			tw[j] = scores[id]
			sum += tw[j]
		}
		norm, eps := cfg.ScoreFunc != ScoreSoftmax, float32(0)
		if f.v41 {
			norm, eps = f.normTopK && k > 1, 1e-20
		}
		for j := range tw {
			if norm {
				tw[j] /= sum + eps
			}
			tw[j] *= float32(cfg.RouteScale)
		}
	}
	return r, nil
}

// moe is model.py's MoE.forward on x [tokens, D]: routed experts in index
// order, each over the tokens that chose it, then the shared expert.
func (f *forward) moe(x []float32) ([]float32, error) {
	cfg, w := f.cfg, f.w
	d, k := cfg.Hidden, cfg.TopK
	ids := make([]int32, 0, f.n)
	for _, s := range f.seqs {
		for _, id := range s {
			ids = append(ids, int32(id))
		}
	}
	r, err := f.route(x, ids)
	if err != nil {
		return nil, err
	}
	f.out.Routes = r
	y := make([]float32, f.n*d)
	f.out.Experts = ExpertAmax{In: make([]float32, cfg.RoutedExperts), Mid: make([]float32, cfg.RoutedExperts)}
	// Each expert's matrices are dead when the next one is read.
	codes := &arena{}
	for e := range cfg.RoutedExperts {
		var rows []int
		var wts []float32
		for t := range f.n {
			for j := range k {
				if r.IDs[t*k+j] != int32(e) {
					continue
				}
				// model.py's y[idx] += expert(x[idx], w) gathers, adds and
				// stores back with a non-accumulating index_put, so a token
				// listed twice for one expert (tid2eid can do that) gets
				// one contribution: the last slot's, which is stored last.
				if n := len(rows); n > 0 && rows[n-1] == t {
					wts[n-1] = r.Weights[t*k+j]
					continue
				}
				rows = append(rows, t)
				wts = append(wts, r.Weights[t*k+j])
			}
		}
		if len(rows) == 0 {
			continue
		}
		start := time.Now()
		codes.reset()
		ld := &loader{ctx: f.ctx, arena: codes}
		var ew [3]*linear
		for i := range ew {
			ew[i] = ld.lin(w.t.experts[e][i])
		}
		if ld.err != nil {
			return nil, ld.err
		}
		f.expertLoad += time.Since(start)
		f.out.WeightBytes += ld.bytes
		f.out.ExpertsRun++
		xe := make([]float32, len(rows)*d)
		for i, t := range rows {
			copy(xe[i*d:(i+1)*d], x[t*d:(t+1)*d])
		}
		f.out.Experts.In[e] = amax(xe)
		ye, err := f.expert(xe, len(rows), ew, wts, &f.out.Experts.Mid[e])
		if err != nil {
			return nil, err
		}
		for i, t := range rows {
			yt := y[t*d : (t+1)*d]
			for c, v := range ye[i*d : (i+1)*d] {
				yt[c] += v
			}
		}
		if err := f.ctx.Err(); err != nil {
			return nil, err
		}
	}
	ys, err := f.expert(x, f.n, w.shared, nil, nil)
	if err != nil {
		return nil, err
	}
	for i, v := range ys {
		y[i] += v
	}
	return y, nil
}

// expert is model.py's Expert.forward on m rows: the SwiGLU with the up
// projection clamped to ±swiglu_limit and the gate clamped from above,
// times the routing weight (routed experts) before w2. When midAmax is
// not nil it receives the largest magnitude entering w2.
func (f *forward) expert(x []float32, m int, w [3]*linear, weights []float32, midAmax *float32) ([]float32, error) {
	g, err := f.mm(w[0], x, m, f.a8)
	if err != nil {
		return nil, err
	}
	u, err := f.mm(w[2], x, m, f.a8)
	if err != nil {
		return nil, err
	}
	lim := float32(f.cfg.SwiGLULimit)
	inter := w[0].rows
	for i := range g {
		gi, ui := g[i], u[i]
		if lim > 0 {
			ui = min(max(ui, -lim), lim)
			gi = min(gi, lim)
		}
		a := gi * sigmoid(gi) * ui
		if weights != nil {
			a = weights[i/inter] * a
		}
		g[i] = a
	}
	if midAmax != nil {
		*midAmax = amax(g)
	}
	return f.mm(w[1], g, m, f.a8)
}

// amax is the largest magnitude in v (NaN if v holds one).
func amax(v []float32) float32 {
	var m float32
	for _, x := range v {
		if a := float32(math.Abs(float64(x))); a > m || a != a {
			m = a
		}
	}
	return m
}

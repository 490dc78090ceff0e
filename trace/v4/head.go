package v4

import (
	"context"
	"fmt"
	"math"
)

// Final is the output head's computation for a batch of tokens.
type Final struct {
	Pre    []float32 // [tokens, hc] the hc head's collapse weights
	Hidden []float32 // [tokens, D] the collapsed stream
	Norm   []float32 // [tokens, D] after the final norm
	Logits []float32 // [tokens, vocab]
}

// Logits runs the hc head, the final norm and the head on stream
// [tokens, hc, D] (every position, as model.py's ParallelHead computes
// the last): pre = sigmoid(mixes·scale + base) + hc_eps, no Sinkhorn.
func (m *Model) Logits(ctx context.Context, stream []float32) (*Final, error) {
	cfg := m.Config
	if len(m.headProblems) > 0 {
		return nil, fmt.Errorf("head cannot run: %v", m.headProblems)
	}
	n, d := cfg.HCMult, cfg.Hidden
	hd := n * d
	if len(stream)%hd != 0 {
		return nil, fmt.Errorf("%d stream values are not whole tokens of %d x %d", len(stream), n, d)
	}
	tokens := len(stream) / hd
	ld := &loader{ctx: ctx}
	fn, base, scale := ld.lin(m.hcHead.fn), ld.vec(m.hcHead.base), ld.vec(m.hcHead.scale)
	norm, head := ld.vec(m.norm), ld.lin(m.head)
	if ld.err != nil {
		return nil, ld.err
	}
	apply := func(w *linear, x []float32) ([]float32, error) {
		if d := newDevice(m.backend); d != nil {
			return w.applyOn(ctx, d, x, tokens, false)
		}
		return w.apply(ctx, x, tokens, false)
	}
	mixes, err := apply(fn, stream)
	if err != nil {
		return nil, err
	}
	out := &Final{Pre: make([]float32, tokens*n), Hidden: make([]float32, tokens*d)}
	for t := range tokens {
		xt := stream[t*hd : (t+1)*hd]
		var ss float32
		for _, v := range xt {
			ss += v * v
		}
		rs := float32(1 / math.Sqrt(float64(ss/float32(hd))+cfg.NormEps))
		pre := out.Pre[t*n : (t+1)*n]
		for i := range n {
			pre[i] = sigmoid(mixes[t*n+i]*rs*scale[0]+base[i]) + float32(cfg.HCEps)
		}
		y := out.Hidden[t*d : (t+1)*d]
		for i := range n {
			for c, v := range xt[i*d : (i+1)*d] {
				y[c] += pre[i] * v
			}
		}
	}
	out.Norm = rmsNorm(out.Hidden, norm, cfg.NormEps)
	out.Logits, err = apply(head, out.Norm)
	return out, err
}

package v4

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/dsfs/dsfs/simd"
)

// kvQuantBlock is the FP8 fake-quant block of the window and compressed
// KV's non-rope dims; fp4Block the FP4 block of the indexer's q and k.
const (
	kvQuantBlock = 64
	fp4Block     = 32
)

// attention runs model.py's Attention.forward (prefill, start_pos 0) on x
// [tokens, D], sequence by sequence where tokens interact, and returns
// wo_b's output.
func (f *forward) attention(x []float32) ([]float32, error) {
	cfg, out := f.cfg, f.out
	h, hd, rd := cfg.Heads, cfg.HeadDim, cfg.RopeDim
	var q, kv []float32
	var rp *rope
	var err error
	if out.QR, q, kv, rp, err = f.project(x); err != nil {
		return nil, err
	}
	rmsNormInto(q, q, nil, hd, cfg.NormEps) // per head, unweighted

	o := make([]float32, f.n*h*hd)
	err = f.attendSeqs(rp, q, kv, o, func(_, row, T int) error {
		for t := range T {
			simd.QuantE4M3(kv[(row+t)*hd:(row+t+1)*hd-rd], kvQuantBlock)
		}
		sa, err := f.seqAttention(x[row*cfg.Hidden:(row+T)*cfg.Hidden], out.QR[row*cfg.QLoRA:(row+T)*cfg.QLoRA],
			q[row*h*hd:(row+T)*h*hd], kv[row*hd:(row+T)*hd], o[row*h*hd:(row+T)*h*hd], rp)
		if err != nil {
			return err
		}
		out.Seqs = append(out.Seqs, sa)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.WindowKV = kv
	return f.outProject(o)
}

// attendSeqs runs attend(seq, row, T) on each sequence in turn, its
// tokens the rows [row, row+T) of q [tokens, heads, head_dim], kv
// [tokens, head_dim] and o [tokens, heads, head_dim]: q and kv rotated
// before, the rotation undone on o after, since rotary positions restart
// with each sequence.
func (f *forward) attendSeqs(rp *rope, q, kv, o []float32, attend func(seq, row, T int) error) error {
	h := f.cfg.Heads
	row := 0
	for si, s := range f.seqs {
		T := len(s)
		f.rotate(rp, q, h, row, T, false)
		f.rotate(rp, kv, 1, row, T, false)
		if err := attend(si, row, T); err != nil {
			return err
		}
		f.rotate(rp, o, h, row, T, true)
		row += T
		if err := f.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// outProject runs the attention's output projection, grouped wo_a then
// wo_b, on o [tokens, heads, head_dim].
func (f *forward) outProject(o []float32) ([]float32, error) {
	z, err := f.groupedWoA(o)
	if err != nil {
		return nil, err
	}
	return f.mm(f.w.woB, z, f.n, f.a8)
}

// project runs the attention's projections of x [tokens, D]: the query
// LoRA qr (q_norm-ed), the queries q [tokens, heads, head_dim] and the
// window KV kv [tokens, head_dim] (kv_norm-ed), and makes the rotary
// tables for the longest sequence.
func (f *forward) project(x []float32) (qr, q, kv []float32, rp *rope, err error) {
	cfg, w := f.cfg, f.w
	q0, err := f.mm(w.wqA, x, f.n, f.a8)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	qr = rmsNorm(q0, w.qNorm, cfg.NormEps)
	if q, err = f.mm(w.wqB, qr, f.n, f.a8); err != nil {
		return nil, nil, nil, nil, err
	}
	if kv, err = f.mm(w.wkv, x, f.n, f.a8); err != nil {
		return nil, nil, nil, nil, err
	}
	kv = rmsNorm(kv, w.kvNorm, cfg.NormEps)
	longest := 0
	for _, s := range f.seqs {
		longest = max(longest, len(s))
	}
	return qr, q, kv, newRope(cfg.InvFreq(f.l), longest), nil
}

// rotate applies RoPE (inverse: its inverse) to the rope dims, the last
// of each head, of rows [row, row+T) of v [tokens, heads, head_dim]: one
// sequence, at positions 0 to T-1.
func (f *forward) rotate(rp *rope, v []float32, heads, row, T int, inverse bool) {
	hd, rd := f.cfg.HeadDim, f.cfg.RopeDim
	for t := range T {
		for i := range heads {
			rp.apply(v[((row+t)*heads+i)*hd+hd-rd:((row+t)*heads+i+1)*hd], t, inverse)
		}
	}
}

// groupedWoA is the grouped output projection's first half: group g of o
// [tokens, H·d] (heads g·H/G ..) times its block of wo_a, into z
// [tokens, G·o_lora], which wo_b then takes whole.
func (f *forward) groupedWoA(o []float32) ([]float32, error) {
	cfg, w := f.cfg, f.w
	g, r := cfg.OGroups, cfg.OLoRA
	hw := cfg.Heads * cfg.HeadDim
	gw := hw / g
	z := make([]float32, f.n*g*r)
	switch {
	case f.n == 0:
	case f.dev != nil:
		// Group i's inputs gathered into rows of their own, through the
		// backend as any product.
		xi := make([]float32, f.n*gw)
		for i := range g {
			for t := range f.n {
				copy(xi[t*gw:(t+1)*gw], o[t*hw+i*gw:t*hw+(i+1)*gw])
			}
			zi, err := f.mm(&linear{w: w.woA.w[i*r*gw : (i+1)*r*gw], rows: r, cols: gw}, xi, f.n, false)
			if err != nil {
				return nil, err
			}
			for t := range f.n {
				copy(z[t*g*r+i*r:t*g*r+(i+1)*r], zi[t*r:(t+1)*r])
			}
		}
	default:
		start := time.Now()
		for i := range g {
			if err := f.ctx.Err(); err != nil {
				return nil, err
			}
			simd.MatMulT(z[i*r:], g*r, o[i*gw:], hw, w.woA.w[i*r*gw:], gw, f.n, r, gw)
		}
		f.out.GEMMTime += time.Since(start)
	}
	return z, nil
}

// seqAttention attends one sequence: x [T, D] the attention input, qr its
// query latent, q [T, H, d] and kv [T, d] rotated (and kv fake-quantised),
// o [T, H, d] the output to fill.
func (f *forward) seqAttention(x, qr, q, kv, o []float32, rp *rope) (SeqAttention, error) {
	cfg, w := f.cfg, f.w
	T := len(kv) / cfg.HeadDim
	win := cfg.Window
	nw := min(T, win)
	var sa SeqAttention
	var comp []float32
	var compIdx []int32 // [T, kc]
	kc := 0
	if ratio := cfg.Ratio(f.l); ratio > 0 {
		var err error
		comp, err = f.compress(x, w.compressor, rp, false)
		if err != nil {
			return sa, err
		}
		sa.Compressed = comp
		nc := T / ratio
		if w.idxWqB != nil {
			ik, err := f.indexer(x, qr, rp, &sa)
			if err != nil {
				return sa, err
			}
			kc = ik
			compIdx = make([]int32, T*kc)
			for i, v := range sa.IndexTopK {
				compIdx[i] = -1
				if v >= 0 {
					compIdx[i] = v + int32(T)
				}
			}
		} else {
			kc = nc
			compIdx = make([]int32, T*kc)
			for t := range T {
				for j := range nc {
					compIdx[t*kc+j] = -1
					if j < (t+1)/ratio {
						compIdx[t*kc+j] = int32(j + T)
					}
				}
			}
		}
	}
	sa.K = nw + kc
	sa.TopK = make([]int32, T*sa.K)
	for t := range T {
		idx := sa.TopK[t*sa.K : (t+1)*sa.K]
		lo := max(0, t-win+1)
		for j := range nw {
			idx[j] = -1
			if lo+j <= t {
				idx[j] = int32(lo + j)
			}
		}
		copy(idx[nw:], compIdx[t*kc:(t+1)*kc])
	}
	all := append(append([]float32(nil), kv...), comp...)
	err := f.attend(o, q, all, w.sink, sa.TopK, sa.K, cfg.Heads, cfg.HeadDim, float32(1/math.Sqrt(float64(cfg.HeadDim))))
	return sa, err
}

// sparseAttention is kernel.py's sparse_attn: for query t and head h over
// the rows idx[t] (-1 = none) of kv (K = V), softmax(scale·q·k) with the
// head's sink logit (unscaled) in the denominator. It looks at ctx before
// each query.
func sparseAttention(ctx context.Context, o, q, kv, sink []float32, idx []int32, k, heads, d int, scale float32) error {
	T := len(idx) / max(k, 1)
	return parallelForCtx(ctx, T, func(t int) {
		s := make([]float32, k)
		ids := idx[t*k : (t+1)*k]
		for h := range heads {
			qh := q[(t*heads+h)*d : (t*heads+h+1)*d]
			mx := float32(math.Inf(-1))
			for j, r := range ids {
				if r < 0 {
					continue
				}
				s[j] = simd.Dot(qh, kv[int(r)*d:(int(r)+1)*d]) * scale
				mx = max(mx, s[j])
			}
			oh := o[(t*heads+h)*d : (t*heads+h+1)*d]
			clear(oh)
			var sum float32
			for j, r := range ids {
				if r < 0 {
					continue
				}
				p := float32(math.Exp(float64(s[j] - mx)))
				sum += p
				simd.Axpy(oh, p, kv[int(r)*d:(int(r)+1)*d])
			}
			sum += float32(math.Exp(float64(sink[h] - mx)))
			for c := range oh {
				oh[c] /= sum
			}
		}
	})
}

// compress is model.py's Compressor.forward in prefill: softmax-gated
// pooling of each whole group of ratio tokens (with ratio 4, each entry
// also pools the previous group through the first half of the channels),
// then norm, RoPE at the group's first position, and either the FP8
// fake-quant of the non-rope dims or (rotate, the indexer's) a Hadamard
// rotation and FP4 fake-quant.
func (f *forward) compress(x []float32, c *compressorWeights, rp *rope, rotate bool) ([]float32, error) {
	cfg := f.cfg
	D := cfg.Hidden
	T := len(x) / D
	ratio, hd, rd := c.ratio, c.hd, cfg.RopeDim
	nc := T / ratio
	if nc == 0 {
		return nil, nil
	}
	overlap := ratio == 4
	coff := 1
	if overlap {
		coff = 2
	}
	w := coff * hd
	kv, err := f.mm(c.wkv, x, T, false)
	if err != nil {
		return nil, err
	}
	score, err := f.mm(c.wgate, x, T, false)
	if err != nil {
		return nil, err
	}
	for t := range nc * ratio {
		ape := c.ape[(t%ratio)*w : (t%ratio+1)*w]
		for i := range w {
			score[t*w+i] += ape[i]
		}
	}
	out := make([]float32, nc*hd)
	err = parallelForCtx(f.ctx, nc, func(g int) {
		rows := make([]int, 0, 2*ratio) // token of each pooled row
		offs := make([]int, 0, 2*ratio) // channel offset of each pooled row
		p := make([]float32, 2*ratio)
		if overlap && g > 0 {
			for r := range ratio {
				rows = append(rows, (g-1)*ratio+r)
				offs = append(offs, 0)
			}
		}
		cur := 0
		if overlap {
			cur = hd
		}
		for r := range ratio {
			rows = append(rows, g*ratio+r)
			offs = append(offs, cur)
		}
		o := out[g*hd : (g+1)*hd]
		for ch := range hd {
			mx := float32(math.Inf(-1))
			for i, t := range rows {
				mx = max(mx, score[t*w+offs[i]+ch])
			}
			var sum float32
			for i, t := range rows {
				p[i] = float32(math.Exp(float64(score[t*w+offs[i]+ch] - mx)))
				sum += p[i]
			}
			var acc float32
			for i, t := range rows {
				acc += kv[t*w+offs[i]+ch] * (p[i] / sum)
			}
			o[ch] = acc
		}
	})
	if err != nil {
		return nil, err
	}
	rmsNormInto(out, out, c.norm, hd, cfg.NormEps)
	for g := range nc {
		e := out[g*hd : (g+1)*hd]
		rp.apply(e[hd-rd:], g*ratio, false)
		if !rotate {
			simd.QuantE4M3(e[:hd-rd], kvQuantBlock)
		}
	}
	if rotate {
		if err := f.rotateFP4(out, hd, float32(math.Pow(float64(hd), -0.5))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// indexer is model.py's Indexer.forward in prefill: it fills sa's index
// fields and returns the number of picks per query.
func (f *forward) indexer(x, qr []float32, rp *rope, sa *SeqAttention) (int, error) {
	cfg, w := f.cfg, f.w
	T := len(x) / cfg.Hidden
	nh, dh, rd := cfg.IndexHeads, cfg.IndexDim, cfg.RopeDim
	ratio := 4
	q, err := f.mm(w.idxWqB, qr, T, f.a8)
	if err != nil {
		return 0, err
	}
	hs := float32(math.Pow(float64(dh), -0.5))
	for t := range T {
		for h := range nh {
			rp.apply(q[(t*nh+h)*dh+dh-rd:(t*nh+h+1)*dh], t, false)
		}
	}
	if err := f.rotateFP4(q, dh, hs); err != nil {
		return 0, err
	}
	keys, err := f.compress(x, w.idxCompressor, rp, true)
	if err != nil {
		return 0, err
	}
	sa.IndexKeys = keys
	wts, err := f.mm(w.idxWeights, x, T, false)
	if err != nil {
		return 0, err
	}
	ws := float32(math.Pow(float64(dh), -0.5) * math.Pow(float64(nh), -0.5))
	for i := range wts {
		wts[i] *= ws
	}
	nc := T / ratio
	k := min(cfg.IndexTopK, nc)
	sa.IndexK = k
	sa.IndexScores = make([]float32, T*nc)
	sa.IndexTopK = make([]int32, T*k)
	sa.IndexMargin = make([]float32, T)
	err = parallelForCtx(f.ctx, T, func(t int) {
		order := make([]int, nc)
		sc := sa.IndexScores[t*nc : (t+1)*nc]
		for j := range nc {
			if j >= (t+1)/ratio {
				sc[j] = float32(math.Inf(-1))
				continue
			}
			kj := keys[j*dh : (j+1)*dh]
			var s float32
			for h := range nh {
				dot := simd.Dot(q[(t*nh+h)*dh:(t*nh+h+1)*dh], kj)
				s += max(dot, 0) * wts[t*nh+h]
			}
			sc[j] = s
		}
		for j := range order {
			order[j] = j
		}
		// Descending score; equal scores keep the lower index first.
		sort.SliceStable(order, func(a, b int) bool { return sc[order[a]] > sc[order[b]] })
		picks := sa.IndexTopK[t*k : (t+1)*k]
		for i := range k {
			picks[i] = int32(order[i])
			if order[i] >= (t+1)/ratio {
				picks[i] = -1
			}
		}
		sa.IndexMargin[t] = float32(math.Inf(1))
		if k < nc && !math.IsInf(float64(sc[order[k]]), -1) {
			sa.IndexMargin[t] = sc[order[k-1]] - sc[order[k]]
		}
	})
	return k, err
}

package v4

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/dsfs/dsfs/simd"
)

// Shared41 is the CSA2 attention state of one sequence that layers hand
// down the stack (model.py's SharedAttentionRuntime): the compressed KV
// and index keys of the last kv source, the picks of the last index
// source and the candidate mask of the candidate source. Layers replace
// fields, never modify them, so a copy of a Shared41 stays valid.
type Shared41 struct {
	// CompressKV [n_c, head_dim] after RoPE and the FP4 (E4M3/16)
	// fake-quant; IndexK [n_c, index_head_dim] after RoPE and FP4.
	CompressKV, IndexK []float32
	// TopK [T, K] compressed positions in position order, -1 = none.
	TopK []int32
	K    int
	// Candidates [T, n_c]: the candidate source's mask.
	Candidates []bool
}

// State41 is what a V4.1 layer needs besides its weights: the residual
// streams [tokens, hc, D], the carried collapse weights [tokens, hc] and
// each sequence's shared attention state.
type State41 struct {
	Stream []float32
	PreMix []float32
	Shared []Shared41
}

// InitialState41 is the state entering layer 0: the embedding rows
// [tokens, D] repeated to hc streams, the one-hot pre_mix
// (make_identity_pre_mix) and no shared attention state.
func (c *Config41) InitialState41(embed []float32, seqs int) *State41 {
	n := c.HCMult
	tokens := len(embed) / c.Hidden
	s := &State41{Stream: c.InitialStream(embed), PreMix: make([]float32, tokens*n), Shared: make([]Shared41, seqs)}
	for r := range tokens {
		s.PreMix[r*n] = 1
	}
	return s
}

// EngramOutput is what an Engram layer's memory lookup did.
type EngramOutput struct {
	// HashIDs [tokens, (max_ngram-1)·heads]: table rows, offsets included.
	HashIDs []int32
	Cols    int
	// RowsRead is the number of distinct table rows read.
	RowsRead int
	WKV      []float32 // [tokens, (hc+1)·D]: hc keys, then the value
	Gate     []float32 // [tokens, hc]
	Stream   []float32 // [tokens, hc, D]: the stream after the update
}

// SeqAttention41 is what V4.1's attention computed for one sequence.
type SeqAttention41 struct {
	// TopK [T, K]: window rows (-1 padded), then compressed positions
	// offset by T (-1 = none).
	TopK []int32
	K    int
	// Compressed [n_c, head_dim]: the shared compressed KV attended over.
	Compressed []float32
	// Kv sources: Latent [n_c, head_dim], the compressor's output before
	// RoPE (what the index keys are made of).
	Latent []float32
	// Index sources: keys, scores [T, n_c] (-inf where masked), picks
	// [T, IndexK] in position order, margins (k-th minus (k+1)-th finite
	// score; +Inf where nothing was decided).
	IndexKeys   []float32
	IndexScores []float32
	IndexTopK   []int32
	IndexK      int
	IndexMargin []float32
	// Candidate source: block scores [T, NBlocks] (the newest block
	// pinned at +Inf), the mask [T, n_c] and each row's margin.
	BlockScores []float32
	NBlocks     int
	Candidates  []bool
	CandMargin  []float32
}

// LayerOutput41 is what one V4.1 layer computed.
type LayerOutput41 struct {
	Layer     int
	Tokens    int
	Precision Precision
	Role      Role41

	Engram        *EngramOutput
	HCAttn, HCFFN HC
	PreMixIn      []float32
	AttnIn, QR    []float32
	WindowKV      []float32
	Seqs          []SeqAttention41
	AttnOut       []float32
	StreamMid     []float32
	FFNIn, FFNOut []float32
	StreamOut     []float32
	// PreMixOut is the FFN site's pre, carried to the next layer.
	PreMixOut []float32
	Routes    Routes
	// Out is the state entering the next layer.
	Out *State41

	LoadTime, Time, GEMMTime time.Duration
	WeightBytes              int64
	ExpertsRun               int
	Experts                  ExpertAmax
}

// Forward runs V4.1 layer l on state in for the sequences seqs (token
// ids; positions 0.. in each) at precision p. in is not modified.
func (m *Model41) Forward(ctx context.Context, l int, in *State41, seqs [][]int, p Precision) (*LayerOutput41, error) {
	cfg := m.Config
	if l < 0 || l >= cfg.Layers {
		return nil, fmt.Errorf("layer %d outside [0, %d)", l, cfg.Layers)
	}
	if m.layers[l] == nil {
		return nil, fmt.Errorf("layer %d cannot run: %v", l, m.problems[l])
	}
	n, err := cfg.tokens(l, seqs, p)
	if err != nil {
		return nil, err
	}
	if len(in.Stream) != n*cfg.HCMult*cfg.Hidden || len(in.PreMix) != n*cfg.HCMult || len(in.Shared) != len(seqs) {
		return nil, fmt.Errorf("layer %d: a state of %d stream values, %d pre_mix values and %d sequences for %d tokens of %d x %d in %d sequences",
			l, len(in.Stream), len(in.PreMix), len(in.Shared), n, cfg.HCMult, cfg.Hidden, len(seqs))
	}
	start := time.Now()
	w, err := m.loadLayer41(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	load := time.Since(start)
	out := &LayerOutput41{Layer: l, Tokens: n, Precision: p, Role: cfg.Roles[l], PreMixIn: in.PreMix}
	f := &forward41{forward: forward{cfg: cfg.Config, ctx: ctx, w: &w.layerWeights, l: l, a8: p == A8, seqs: seqs, n: n,
		out: &LayerOutput{}, v41: true, gateTemp: float32(cfg.GateTemp), normTopK: cfg.NormTopKProb, dev: newDevice(m.backend)},
		m: m, c41: cfg, w41: w, o: out}
	if err := f.run(in); err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	out.LoadTime = load + f.expertLoad
	out.Time = time.Since(start)
	out.GEMMTime = f.out.GEMMTime
	out.WeightBytes = w.bytes + f.out.WeightBytes
	out.ExpertsRun = f.out.ExpertsRun
	out.Experts = f.out.Experts
	return out, nil
}

// forward41 is the state of one V4.1 Forward call; the embedded V4
// forward supplies the matrix products, the hc coefficients and the MoE.
type forward41 struct {
	forward
	m   *Model41
	c41 *Config41
	w41 *layer41Weights
	o   *LayerOutput41
}

func (f *forward41) run(in *State41) error {
	cfg, w, o := f.cfg, f.w, f.o
	n, d := cfg.HCMult, cfg.Hidden
	stream := in.Stream
	if f.o.Role.Engram {
		e, err := f.engram(stream)
		if err != nil {
			return err
		}
		o.Engram = e
		stream = e.Stream
	}
	// Single-pass mHC: each site computes (pre, post, comb) from its own
	// input, but collapses with the previous site's pre.
	_, hcA, err := f.hcPre(stream, &w.hcAttn)
	if err != nil {
		return err
	}
	o.HCAttn = hcA
	o.AttnIn = rmsNorm(collapse(stream, in.PreMix, n, d), w.attnNorm, cfg.NormEps)
	if err := f.ctx.Err(); err != nil {
		return err
	}
	shared := append([]Shared41(nil), in.Shared...)
	attn, err := f.attention41(o.AttnIn, shared)
	if err != nil {
		return err
	}
	o.AttnOut = attn
	o.StreamMid = hcPost(attn, stream, hcA, n, d)
	if err := f.ctx.Err(); err != nil {
		return err
	}
	_, hcF, err := f.hcPre(o.StreamMid, &w.hcFFN)
	if err != nil {
		return err
	}
	o.HCFFN = hcF
	o.FFNIn = rmsNorm(collapse(o.StreamMid, hcA.Pre, n, d), w.ffnNorm, cfg.NormEps)
	ffn, err := f.moe(o.FFNIn)
	if err != nil {
		return err
	}
	o.Routes = f.out.Routes
	o.FFNOut = ffn
	o.StreamOut = hcPost(ffn, o.StreamMid, hcF, n, d)
	o.PreMixOut = hcF.Pre
	o.Out = &State41{Stream: o.StreamOut, PreMix: o.PreMixOut, Shared: shared}
	return nil
}

// collapse is hc_pre: y = Σ_i pre_i·x_i per token, [tokens, D].
func collapse(x, pre []float32, n, d int) []float32 {
	tokens := len(pre) / n
	y := make([]float32, tokens*d)
	for t := range tokens {
		yt := y[t*d : (t+1)*d]
		for i := range n {
			p := pre[t*n+i]
			for c, v := range x[(t*n+i)*d : (t*n+i+1)*d] {
				yt[c] += p * v
			}
		}
	}
	return y
}

// engram is engram.py's lookup and model.py's Engram.forward on the
// streams entering the layer.
func (f *forward41) engram(stream []float32) (*EngramOutput, error) {
	cfg, c41, w := f.cfg, f.c41, f.w41
	et := f.m.layers[f.l].engram
	li := slices.Index(c41.EngramLayers, f.l)
	n, d := cfg.HCMult, cfg.Hidden
	cols := (c41.EngramMaxNgram - 1) * c41.EngramHeads
	hd := c41.EngramHeadDim
	e := &EngramOutput{Cols: cols}
	for _, s := range f.seqs {
		e.HashIDs = append(e.HashIDs, f.m.Engram.Hash(li, s, c41.EngramMaxNgram, c41.EngramHeads)...)
	}
	// Rows on demand: each distinct row once (a real table is ~98 GB).
	rows := map[int32][]float32{}
	emb := make([]float32, f.n*cols*hd)
	for i, r := range e.HashIDs {
		v, ok := rows[r]
		if !ok {
			v = make([]float32, hd)
			if err := et.row(v, int(r)); err != nil {
				return nil, err
			}
			rows[r] = v
			f.o.WeightBytes += int64(hd + hd/et.scaleBy)
		}
		copy(emb[i*hd:(i+1)*hd], v)
	}
	e.RowsRead = len(rows)
	kv, err := f.mm(w.engramWkv, emb, f.n, f.a8)
	if err != nil {
		return nil, err
	}
	e.WKV = kv
	e.Gate = make([]float32, f.n*n)
	e.Stream = make([]float32, len(stream))
	eps := c41.NormEps
	sd := float32(math.Pow(float64(d), -0.5))
	for t := range f.n {
		kt := kv[t*(n+1)*d : (t+1)*(n+1)*d]
		value := kt[n*d:]
		for k := range n {
			h := stream[(t*n+k)*d : (t*n+k+1)*d]
			key := kt[k*d : (k+1)*d]
			qk := w.engramQK[k*d : (k+1)*d]
			var hh, kk, dot float32
			for c := range d {
				hh += h[c] * h[c]
				kk += key[c] * key[c]
				dot += h[c] * qk[c] * key[c]
			}
			rstd := float32(1/math.Sqrt(float64(hh/float32(d))+eps)) * float32(1/math.Sqrt(float64(kk/float32(d))+eps))
			dot = dot * rstd * sd
			g := sigmoid(float32(math.Copysign(math.Sqrt(float64(max(float32(math.Abs(float64(dot))), 1e-6))), float64(dot))))
			e.Gate[t*n+k] = g
			o := e.Stream[(t*n+k)*d : (t*n+k+1)*d]
			for c := range d {
				o[c] = h[c] + g*value[c]
			}
		}
	}
	return e, nil
}

// attention41 runs model.py's V4.1 Attention.forward (prefill) on x
// [tokens, D], updating shared (one entry per sequence) as the layer's
// role publishes state.
func (f *forward41) attention41(x []float32, shared []Shared41) ([]float32, error) {
	cfg, o := f.cfg, f.o
	h, hd := cfg.Heads, cfg.HeadDim
	var q, kv []float32
	var rp *rope
	var err error
	if o.QR, q, kv, rp, err = f.project(x); err != nil {
		return nil, err
	}
	out := make([]float32, f.n*h*hd)
	err = f.attendSeqs(rp, q, kv, out, func(si, row, T int) error {
		// The window KV: FP8 over all head_dim values, in FP8 blocks.
		if err := f.actQuant(kv[row*hd:(row+T)*hd], f.c41.FP8Block, false); err != nil {
			return err
		}
		sa, err := f.seqAttention41(x[row*cfg.Hidden:(row+T)*cfg.Hidden], o.QR[row*cfg.QLoRA:(row+T)*cfg.QLoRA],
			q[row*h*hd:(row+T)*h*hd], kv[row*hd:(row+T)*hd], out[row*h*hd:(row+T)*h*hd], rp, &shared[si])
		if err != nil {
			return err
		}
		o.Seqs = append(o.Seqs, sa)
		return nil
	})
	if err != nil {
		return nil, err
	}
	o.WindowKV = kv
	return f.outProject(out)
}

// seqAttention41 attends one sequence: the window, plus (ratio > 0) the
// shared compressed KV at the shared picks, after this layer's role has
// published what it owns.
func (f *forward41) seqAttention41(x, qr, q, kv, o []float32, rp *rope, sh *Shared41) (SeqAttention41, error) {
	cfg, role := f.cfg, f.o.Role
	T := len(kv) / cfg.HeadDim
	win := cfg.Window
	nw := min(T, win)
	var sa SeqAttention41
	kc := 0
	var comp []float32
	if ratio := role.Ratio; ratio > 0 {
		nc := T / ratio
		var latent []float32
		if role.KVSource {
			var err error
			if latent, err = f.compress41(x, T); err != nil {
				return sa, err
			}
			sa.Latent = latent
			if role.OwnsIndexK {
				if sh.IndexK, err = f.indexKeys(latent, nc, rp); err != nil {
					return sa, err
				}
			}
		}
		if role.IndexSource {
			if nc == 0 {
				sh.TopK, sh.K = nil, 0
			} else if err := f.indexer41(x, qr, rp, sh, &sa, T); err != nil {
				return sa, err
			}
		}
		if latent != nil {
			ckv := append([]float32(nil), latent...)
			for j := range nc {
				e := ckv[j*cfg.HeadDim : (j+1)*cfg.HeadDim]
				rp.apply(e[cfg.HeadDim-cfg.RopeDim:], j*ratio, false)
			}
			if err := f.fp4E4M3(ckv, fp4KVBlock); err != nil {
				return sa, err
			}
			sh.CompressKV = ckv
		}
		comp = sh.CompressKV[:min(len(sh.CompressKV), nc*cfg.HeadDim)]
		sa.Compressed = comp
		kc = sh.K
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
		for j := range kc {
			idx[nw+j] = -1
			if v := sh.TopK[t*kc+j]; v >= 0 {
				idx[nw+j] = v + int32(T)
			}
		}
	}
	all := append(append([]float32(nil), kv...), comp...)
	err := f.attend(o, q, all, f.w.sink, sa.TopK, sa.K, cfg.Heads, cfg.HeadDim, float32(1/math.Sqrt(float64(cfg.HeadDim))))
	return sa, err
}

// compress41 is V4.1's Compressor.forward in prefill: ratio 1 is
// norm(wkv(x)); above, softmax-gated pooling of each whole group of ratio
// tokens (no overlap, no ape), then norm. The result is before RoPE.
func (f *forward41) compress41(x []float32, T int) ([]float32, error) {
	cfg, w := f.cfg, f.w41
	hd, ratio := cfg.HeadDim, f.o.Role.Ratio
	nc := T / ratio
	if nc == 0 {
		return nil, nil
	}
	kv, err := f.mm(w.cWkv, x[:nc*ratio*cfg.Hidden], nc*ratio, false)
	if err != nil {
		return nil, err
	}
	if ratio == 1 {
		return rmsNorm(kv, w.cNorm, cfg.NormEps), nil
	}
	score, err := f.mm(w.cWgate, x[:nc*ratio*cfg.Hidden], nc*ratio, false)
	if err != nil {
		return nil, err
	}
	out := make([]float32, nc*hd)
	p := make([]float32, ratio)
	for g := range nc {
		o := out[g*hd : (g+1)*hd]
		for ch := range hd {
			mx := float32(math.Inf(-1))
			for r := range ratio {
				mx = max(mx, score[(g*ratio+r)*hd+ch])
			}
			var sum float32
			for r := range ratio {
				p[r] = float32(math.Exp(float64(score[(g*ratio+r)*hd+ch] - mx)))
				sum += p[r]
			}
			var acc float32
			for r := range ratio {
				acc += kv[(g*ratio+r)*hd+ch] * (p[r] / sum)
			}
			o[ch] = acc
		}
	}
	rmsNormInto(out, out, w.cNorm, hd, cfg.NormEps)
	return out, nil
}

// indexKeys are an index-key owner's keys: k_norm(wk(latent)), RoPE at
// each group's first position, FP4 (E8M0 per 32).
func (f *forward41) indexKeys(latent []float32, nc int, rp *rope) ([]float32, error) {
	cfg, w := f.cfg, f.w41
	k, err := f.mm(w.idxWk, latent, nc, false)
	if err != nil {
		return nil, err
	}
	rmsNormInto(k, k, w.idxKNorm, cfg.IndexDim, cfg.NormEps)
	for j := range nc {
		e := k[j*cfg.IndexDim : (j+1)*cfg.IndexDim]
		rp.apply(e[cfg.IndexDim-cfg.RopeDim:], j*f.o.Role.Ratio, false)
	}
	return k, f.actQuant(k, fp4Block, true)
}

// indexer41 is V4.1's Indexer.forward in prefill: scores over the shared
// index keys, the candidate pool (published by the candidate source,
// applied by later index sources), and the top-k in position order,
// published as the shared picks.
func (f *forward41) indexer41(x, qr []float32, rp *rope, sh *Shared41, sa *SeqAttention41, T int) error {
	cfg, c41, w := f.cfg, f.c41, f.w
	role := f.o.Role
	nh, dh, rd, ratio := cfg.IndexHeads, cfg.IndexDim, cfg.RopeDim, role.Ratio
	q, err := f.mm(w.idxWqB, qr, T, f.a8)
	if err != nil {
		return err
	}
	for t := range T {
		for h := range nh {
			qh := q[(t*nh+h)*dh : (t*nh+h+1)*dh]
			rp.apply(qh[dh-rd:], t, false)
		}
	}
	if err := f.actQuant(q, fp4Block, true); err != nil {
		return err
	}
	wts, err := f.mm(w.idxWeights, x, T, false)
	if err != nil {
		return err
	}
	ws := float32(math.Pow(float64(dh), -0.5) * math.Pow(float64(nh), -0.5))
	for i := range wts {
		wts[i] *= ws
	}
	nc := T / ratio
	keys := sh.IndexK
	if len(keys) < nc*dh {
		return fmt.Errorf("the shared index keys hold %d entries, %d needed", len(keys)/dh, nc)
	}
	sa.IndexKeys = keys[:nc*dh]
	sc := make([]float32, T*nc)
	inf := float32(math.Inf(1))
	parallelFor(T, func(t int) {
		row := sc[t*nc : (t+1)*nc]
		for j := range nc {
			if j >= (t+1)/ratio {
				row[j] = -inf
				continue
			}
			kj := keys[j*dh : (j+1)*dh]
			var s float32
			for h := range nh {
				s += max(simd.Dot(q[(t*nh+h)*dh:(t*nh+h+1)*dh], kj), 0) * wts[t*nh+h]
			}
			row[j] = s
		}
	})
	switch {
	case role.CandidateSource:
		f.candidates(sc, T, nc, sa)
		sh.Candidates = sa.Candidates
	case role.UsesCandidates:
		if len(sh.Candidates) != T*nc {
			return fmt.Errorf("no candidate mask of %d x %d from layer %d", T, nc, c41.CandidateSource)
		}
		for i, keep := range sh.Candidates {
			if !keep {
				sc[i] = -inf
			}
		}
	}
	sa.IndexScores = sc
	k := min(cfg.IndexTopK, nc)
	sa.IndexK = k
	sa.IndexTopK = make([]int32, T*k)
	sa.IndexMargin = make([]float32, T)
	parallelFor(T, func(t int) {
		row := sc[t*nc : (t+1)*nc]
		order := descending(row)
		picks := sa.IndexTopK[t*k : (t+1)*k]
		// Position order; positions the query cannot see become -1 (they
		// sort last: they are the newest).
		sel := append([]int(nil), order[:k]...)
		slices.Sort(sel)
		for i, j := range sel {
			picks[i] = int32(j)
			if j >= (t+1)/ratio {
				picks[i] = -1
			}
		}
		sa.IndexMargin[t] = margin(row, order, k)
	})
	sh.TopK, sh.K = sa.IndexTopK, k
	return nil
}

// candidates is select_candidate_blocks: block score = max over its
// positions (padded with -inf), the query's newest visible block pinned
// to +inf, the top candidate_topk_blocks blocks above -inf kept.
func (f *forward41) candidates(sc []float32, T, nc int, sa *SeqAttention41) {
	bs, kb, ratio := f.c41.CandidateBlockSize, f.c41.CandidateTopKBlocks, f.o.Role.Ratio
	nb := (nc + bs - 1) / bs
	sa.NBlocks = nb
	sa.BlockScores = make([]float32, T*nb)
	sa.Candidates = make([]bool, T*nc)
	sa.CandMargin = make([]float32, T)
	k := min(kb, nb)
	parallelFor(T, func(t int) {
		bsc := sa.BlockScores[t*nb : (t+1)*nb]
		for b := range nb {
			m := float32(math.Inf(-1))
			for j := b * bs; j < min((b+1)*bs, nc); j++ {
				m = max(m, sc[t*nc+j])
			}
			bsc[b] = m
		}
		if cl := (t + 1) / ratio; cl > 0 {
			bsc[(cl-1)/bs] = float32(math.Inf(1))
		}
		order := descending(bsc)
		for _, b := range order[:k] {
			if math.IsInf(float64(bsc[b]), -1) {
				continue
			}
			for j := b * bs; j < min((b+1)*bs, nc); j++ {
				sa.Candidates[t*nc+j] = true
			}
		}
		sa.CandMargin[t] = margin(bsc, order, k)
	})
}

// descending returns the indices of row by descending value; equal values
// keep the lower index first.
func descending(row []float32) []int {
	order := make([]int, len(row))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
	return order
}

// margin is row's k-th minus (k+1)-th value in order, +Inf when either is
// not finite (nothing decided between them).
func margin(row []float32, order []int, k int) float32 {
	if k <= 0 || k >= len(order) {
		return float32(math.Inf(1))
	}
	a, b := float64(row[order[k-1]]), float64(row[order[k]])
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return float32(math.Inf(1))
	}
	return float32(a - b)
}

// e4m3Max and e2m1Max are the largest finite magnitudes of FP8 E4M3 and
// FP4 E2M1.
const (
	e4m3Max = 448
	e2m1Max = 6
)

// fp4KVBlock is the block of the compressed KV's FP4 fake-quant, one
// E4M3 scale per 16 values.
const fp4KVBlock = 16

// FP4QuantE4M3 is V4.1's fp4_act_quant with E4M3 scales (of the
// compressed KV, block 16; the reference of backend.V41Ops), in place per
// block: amax = max(|x|, 6·2^-9), s = e4m3(amax / 6) (not a power of
// two), x <- e2m1(clamp(x/s, ±6))·s.
func FP4QuantE4M3(x []float32, block int) {
	floor := float32(6 * math.Ldexp(1, -9))
	for b := 0; b < len(x); b += block {
		blk := x[b : b+block]
		amax := floor
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := simd.RoundE4M3(min(amax/e2m1Max, e4m3Max))
		for i, v := range blk {
			blk[i] = simd.RoundE2M1(min(max(v/s, -e2m1Max), e2m1Max)) * s
		}
	}
}

// Final41 is V4.1's output head for a batch of tokens.
type Final41 struct {
	Hidden []float32 // [tokens, D]: the last layer's carried collapse
	Norm   []float32 // [tokens, D]
	Logits []float32 // [tokens, vocab]
}

// Logits collapses the state leaving the last layer with its carried
// pre_mix (there is no hc head in V4.1), then the final norm and head.
func (m *Model41) Logits(ctx context.Context, s *State41) (*Final41, error) {
	cfg := m.Config
	if len(m.headProblems) > 0 {
		return nil, fmt.Errorf("head cannot run: %v", m.headProblems)
	}
	n, d := cfg.HCMult, cfg.Hidden
	if len(s.Stream) != len(s.PreMix)*d {
		return nil, fmt.Errorf("%d stream values for %d pre_mix values", len(s.Stream), len(s.PreMix))
	}
	tokens := len(s.PreMix) / n
	ld := &loader{ctx: ctx}
	norm, head := ld.vec(m.norm), ld.lin(m.head)
	if ld.err != nil {
		return nil, ld.err
	}
	out := &Final41{Hidden: collapse(s.Stream, s.PreMix, n, d)}
	out.Norm = rmsNorm(out.Hidden, norm, cfg.NormEps)
	var err error
	if dev := newDevice(m.backend); dev != nil {
		out.Logits, err = head.applyOn(ctx, dev, out.Norm, tokens, false)
	} else {
		out.Logits, err = head.apply(ctx, out.Norm, tokens, false)
	}
	return out, err
}

package v4

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Precision is how the forward treats activations entering quantised
// linears. Both precisions keep the model's own fake-quant sites: window
// and compressed KV to FP8 (non-rope dims, blocks of 64), indexer queries
// and keys to FP4 (blocks of 32) after a Hadamard rotation.
type Precision string

const (
	// A8 is what DeepSeek's reference computes on a real FP8/FP4
	// checkpoint: the input of every FP8/FP4 linear is quantised to FP8
	// per block of 128 with power-of-two scales.
	A8 Precision = "a8"
	// FP32 multiplies unquantised activations by the dequantised weights.
	FP32 Precision = "fp32"
)

// HC is one hyper-connection site's coefficients per token: Pre and Post
// [tokens, hc], Comb [tokens, hc, hc] with Comb[t, j, k] mixing source
// stream j into destination stream k.
type HC struct {
	Pre, Post, Comb []float32
}

// SeqAttention is what the attention of one sequence computed besides
// its output.
type SeqAttention struct {
	// TopK [T, K] is the index list sparse attention ran over: the window
	// rows (-1 padded), then compressed entries offset by T (-1 = none).
	TopK []int32
	K    int
	// Compressed [n_c, head_dim]: the compressed KV entries (after norm,
	// RoPE and FP8 fake-quant); nil in SWA layers.
	Compressed []float32
	// CSA layers: the indexer's keys [n_c, index_head_dim], its scores
	// [T, n_c] (-inf where masked), picks [T, IndexK] in descending score
	// (compressed positions, -1 = none) and each row's margin (k-th minus
	// (k+1)-th finite score, +Inf where nothing was decided).
	IndexKeys   []float32
	IndexScores []float32
	IndexTopK   []int32
	IndexK      int
	IndexMargin []float32
}

// LayerOutput is what one decoder layer computed for a batch of
// sequences. Rows are tokens, sequence after sequence.
type LayerOutput struct {
	Layer     int
	Tokens    int
	Precision Precision

	HCAttn, HCFFN HC
	AttnIn        []float32 // [tokens, D] collapsed, attn_norm-ed
	QR            []float32 // [tokens, q_lora]
	WindowKV      []float32 // [tokens, head_dim]
	Seqs          []SeqAttention
	AttnOut       []float32 // [tokens, D] wo_b's output
	StreamMid     []float32 // [tokens, hc, D]
	FFNIn         []float32 // [tokens, D]
	FFNOut        []float32 // [tokens, D] routed + shared
	StreamOut     []float32 // [tokens, hc, D]
	Routes        Routes

	// LoadTime is the time spent reading and decoding weights, Time the
	// whole forward; WeightBytes is the checkpoint bytes read (routed
	// experts: only those selected).
	LoadTime, Time time.Duration
	// GEMMTime is the part of Time spent in matrix products (with the a8
	// quantisation of their inputs).
	GEMMTime    time.Duration
	WeightBytes int64
	ExpertsRun  int
	// Experts are the largest activation magnitudes each routed expert
	// took in (see ExpertAmax).
	Experts ExpertAmax
}

// ExpertAmax is, per routed expert, the largest magnitude of the
// activations its matrices took in over the tokens routed to it: In
// entered w1 and w3 (the FFN input rows), Mid entered w2 (the SwiGLU's
// output, times the routing weight, as model.py applies it before w2).
// Zero for an expert no token reached. These are what a calibration of
// the experts' input scales reads (ModelOpt's amax).
type ExpertAmax struct {
	In, Mid []float32
}

// InitialStream is the [tokens, hc, D] stream entering layer 0: each
// token's embedding row [tokens, D] in hc_mult identical streams.
func (c *Config) InitialStream(embed []float32) []float32 {
	n, d := c.HCMult, c.Hidden
	s := make([]float32, 0, len(embed)*n)
	for r := 0; r < len(embed); r += d {
		for range n {
			s = append(s, embed[r:r+d]...)
		}
	}
	return s
}

// tokens checks a forward of layer l at precision p over seqs against c
// and counts the tokens.
func (c *Config) tokens(l int, seqs [][]int, p Precision) (int, error) {
	if p != A8 && p != FP32 {
		return 0, fmt.Errorf("precision %q is not a8 or fp32", p)
	}
	n := 0
	for _, s := range seqs {
		n += len(s)
		for _, id := range s {
			if id < 0 || id >= c.Vocab {
				return 0, fmt.Errorf("layer %d: token id %d outside the vocabulary [0, %d)", l, id, c.Vocab)
			}
		}
	}
	return n, nil
}

// Forward runs layer l on stream [tokens, hc, D], the residual streams of
// the sequences seqs (token ids; positions 0.. in each), at precision p.
func (m *Model) Forward(ctx context.Context, l int, stream []float32, seqs [][]int, p Precision) (*LayerOutput, error) {
	cfg := m.Config
	if l < 0 || l >= cfg.Layers {
		return nil, fmt.Errorf("layer %d outside [0, %d)", l, cfg.Layers)
	}
	if l >= len(m.layers) {
		return nil, fmt.Errorf("layer %d cannot run: %v", l, m.problems[len(m.problems)-1])
	}
	if m.layers[l] == nil {
		return nil, fmt.Errorf("layer %d cannot run: %v", l, m.problems[l])
	}
	n, err := cfg.tokens(l, seqs, p)
	if err != nil {
		return nil, err
	}
	if len(stream) != n*cfg.HCMult*cfg.Hidden {
		return nil, fmt.Errorf("layer %d: %d stream values for %d tokens of %d x %d", l, len(stream), n, cfg.HCMult, cfg.Hidden)
	}
	start := time.Now()
	w, err := m.loadLayer(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	f := &forward{cfg: cfg, ctx: ctx, w: w, l: l, a8: p == A8, seqs: seqs, n: n, dev: newDevice(m.backend),
		out: &LayerOutput{Layer: l, Tokens: n, Precision: p, LoadTime: time.Since(start), WeightBytes: w.bytes}}
	if err := f.run(stream); err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	f.out.LoadTime += f.expertLoad
	f.out.Time = time.Since(start)
	return f.out, nil
}

// forward is the state of one Forward call.
type forward struct {
	cfg        *Config
	ctx        context.Context
	w          *layerWeights
	l          int
	a8         bool
	seqs       [][]int
	n          int
	out        *LayerOutput
	expertLoad time.Duration
	// v41 selects V4.1's router: logits divided by gateTemp, weights
	// normalised (by their sum + 1e-20) only with normTopK and k > 1.
	v41      bool
	gateTemp float32
	normTopK bool
	dev      *device // nil: everything on the host
}

// mm is w.apply, timed as matrix-product time.
func (f *forward) mm(w *linear, x []float32, m int, a8 bool) ([]float32, error) {
	start := time.Now()
	defer func() { f.out.GEMMTime += time.Since(start) }()
	if f.dev != nil {
		return w.applyOn(f.ctx, f.dev, x, m, a8)
	}
	return w.apply(f.ctx, x, m, a8)
}

func (f *forward) run(stream []float32) error {
	cfg, w, out := f.cfg, f.w, f.out
	d := cfg.Hidden
	x, hc, err := f.hcPre(stream, &w.hcAttn)
	if err != nil {
		return err
	}
	out.HCAttn = hc
	out.AttnIn = rmsNorm(x, w.attnNorm, cfg.NormEps)
	attn, err := f.attention(out.AttnIn)
	if err != nil {
		return err
	}
	out.AttnOut = attn
	out.StreamMid = hcPost(attn, stream, hc, cfg.HCMult, d)
	x, hc, err = f.hcPre(out.StreamMid, &w.hcFFN)
	if err != nil {
		return err
	}
	out.HCFFN = hc
	out.FFNIn = rmsNorm(x, w.ffnNorm, cfg.NormEps)
	ffn, err := f.moe(out.FFNIn)
	if err != nil {
		return err
	}
	out.FFNOut = ffn
	out.StreamOut = hcPost(ffn, out.StreamMid, hc, cfg.HCMult, d)
	return nil
}

// rmsNorm returns each row of x (rows of len(weight)) times
// 1/sqrt(mean(row²) + eps), times weight, as model.py's RMSNorm in
// float32. A nil weight is the unweighted norm.
func rmsNorm(x, weight []float32, eps float64) []float32 {
	out := make([]float32, len(x))
	rmsNormInto(out, x, weight, len(weight), eps)
	return out
}

func rmsNormInto(dst, x, weight []float32, width int, eps float64) {
	for r := 0; r < len(x); r += width {
		row := x[r : r+width]
		var ss float32
		for _, v := range row {
			ss += v * v
		}
		rs := float32(1 / math.Sqrt(float64(ss/float32(width))+eps))
		o := dst[r : r+width]
		for i, v := range row {
			o[i] = v * rs
			if weight != nil {
				o[i] *= weight[i]
			}
		}
	}
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// hcPre computes a site's coefficients from the streams x [tokens, hc, D]
// and collapses them with pre: mixes = (x·fnᵀ)·rsqrt(mean(x²) + eps) per
// token over hc·D, then the Sinkhorn in kernel.py's op order.
func (f *forward) hcPre(x []float32, s *hcWeights) ([]float32, HC, error) {
	cfg := f.cfg
	n, d := cfg.HCMult, cfg.Hidden
	hd := n * d
	mix := (2 + n) * n
	mixes, err := f.mm(s.fn, x, f.n, false)
	if err != nil {
		return nil, HC{}, err
	}
	eps := float32(cfg.HCEps)
	hc := HC{Pre: make([]float32, f.n*n), Post: make([]float32, f.n*n), Comb: make([]float32, f.n*n*n)}
	y := make([]float32, f.n*d)
	for t := range f.n {
		if err := f.ctx.Err(); err != nil {
			return nil, HC{}, err
		}
		xt := x[t*hd : (t+1)*hd]
		var ss float32
		for _, v := range xt {
			ss += v * v
		}
		rs := float32(1 / math.Sqrt(float64(ss/float32(hd))+cfg.NormEps))
		mt := mixes[t*mix : (t+1)*mix]
		for i := range mt {
			mt[i] *= rs
		}
		pre, post, comb := hc.Pre[t*n:(t+1)*n], hc.Post[t*n:(t+1)*n], hc.Comb[t*n*n:(t+1)*n*n]
		sinkhorn(pre, post, comb, mt, s.scale, s.base, n, cfg.HCSinkhornIters, eps)
		yt := y[t*d : (t+1)*d]
		for i := range n {
			for c, v := range xt[i*d : (i+1)*d] {
				yt[c] += pre[i] * v
			}
		}
	}
	return y, hc, nil
}

// sinkhorn is kernel.py's hc_split_sinkhorn for one token.
func sinkhorn(pre, post, comb, mixes, scale, base []float32, n, iters int, eps float32) {
	for j := range n {
		pre[j] = sigmoid(mixes[j]*scale[0]+base[j]) + eps
		post[j] = 2 * sigmoid(mixes[j+n]*scale[1]+base[j+n])
	}
	for j := range n {
		row := comb[j*n : (j+1)*n]
		mx := float32(math.Inf(-1))
		for k := range n {
			row[k] = mixes[2*n+j*n+k]*scale[2] + base[2*n+j*n+k]
			mx = max(mx, row[k])
		}
		var sum float32
		for k := range n {
			row[k] = float32(math.Exp(float64(row[k] - mx)))
			sum += row[k]
		}
		for k := range n {
			row[k] = row[k]/sum + eps
		}
	}
	cols := func() {
		for k := range n {
			var s float32
			for j := range n {
				s += comb[j*n+k]
			}
			for j := range n {
				comb[j*n+k] /= s + eps
			}
		}
	}
	cols()
	for range iters - 1 {
		for j := range n {
			var s float32
			for k := range n {
				s += comb[j*n+k]
			}
			for k := range n {
				comb[j*n+k] /= s + eps
			}
		}
		cols()
	}
}

// hcPost expands a sublayer output f [tokens, D] into the streams:
// out_k = post_k·f + Σ_j comb[j, k]·res_j.
func hcPost(f, res []float32, hc HC, n, d int) []float32 {
	tokens := len(f) / d
	out := make([]float32, tokens*n*d)
	parallelFor(tokens, func(t int) {
		ft := f[t*d : (t+1)*d]
		rt := res[t*n*d : (t+1)*n*d]
		comb := hc.Comb[t*n*n : (t+1)*n*n]
		for k := range n {
			o := out[(t*n+k)*d : (t*n+k+1)*d]
			p := hc.Post[t*n+k]
			for c := range d {
				var mixed float32
				for j := range n {
					mixed += comb[j*n+k] * rt[j*d+c]
				}
				o[c] = p*ft[c] + mixed
			}
		}
	})
	return out
}

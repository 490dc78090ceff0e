package deepseek2

import (
	"context"
	"fmt"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/trace/backend"
)

// Output is what one decoder layer computed for a batch of sequences, on
// the host. Rows are tokens, sequence after sequence.
type Output struct {
	Layer  int
	MoE    bool
	Tokens int

	AttnOut   []float32 // [tokens, hidden] MLA output after o_proj, before the residual add
	FFNOut    []float32 // [tokens, hidden] dense MLP or MoE (routed + shared) output
	HiddenOut []float32 // [tokens, hidden] the residual stream after the layer
	KVA       []float32 // [tokens, kv_lora + rope] kv_a_proj_with_mqa's raw output
	KVLatent  []float32 // [tokens, kv_lora] the latent after kv_a_layernorm: the cached row
	KPE       []float32 // [tokens, rope] the shared rotary key after RoPE, interleaved pairs
	Routes    *Routes   // MoE layers only

	// LoadTime is the time spent reading and decoding weights (routed
	// experts are read one ahead on a goroutine of their own, so part of
	// it overlaps the arithmetic); Time is the whole forward.
	LoadTime, Time time.Duration
	// WeightBytes is the checkpoint bytes read for the layer's weights
	// (routed experts: only those selected).
	WeightBytes int64
	// ExpertsRun is the number of routed experts that had tokens.
	ExpertsRun int
}

// Forward runs layer l on hidden [tokens, Hidden], the residual stream of
// the sequences whose lengths are lens (positions 0.. in each), on b. ctx
// is checked between matrices, heads and experts, and inside the long
// operations of a Cancellable backend.
func (m *Model) Forward(ctx context.Context, b backend.Backend, l int, hidden []float32, lens []int) (*Output, error) {
	if l < 0 || l >= len(m.layers) {
		return nil, fmt.Errorf("layer %d outside [0, %d)", l, len(m.layers))
	}
	ly := m.layers[l]
	if ly == nil {
		return nil, fmt.Errorf("layer %d cannot run: %v", l, m.problems[l])
	}
	n := 0
	for _, t := range lens {
		n += t
	}
	if len(hidden) != n*m.Config.Hidden {
		return nil, fmt.Errorf("layer %d: %d hidden values for %d tokens of width %d", l, len(hidden), n, m.Config.Hidden)
	}
	if c, ok := b.(backend.Cancellable); ok {
		c.SetContext(ctx)
		defer c.SetContext(nil)
	}
	f := &forward{m: m, b: b, ctx: ctx, ly: ly, n: n, lens: lens, out: &Output{Layer: l, MoE: m.Config.IsMoE(l), Tokens: n}}
	start := time.Now()
	err := f.run(hidden)
	f.free()
	if err == nil {
		err = b.Sync()
	}
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	f.out.Time = time.Since(start)
	return f.out, nil
}

// forward is the state of one Forward call.
type forward struct {
	m    *Model
	b    backend.Backend
	ctx  context.Context
	ly   *layer
	n    int
	lens []int
	out  *Output

	bufs []backend. // freed at the end
		Buffer
}

func (f *forward) alloc(rows, cols int) backend.Mat {
	buf := f.b.Alloc(rows * cols)
	f.bufs = append(f.bufs, buf)
	return backend.Whole(buf, rows, cols)
}

func (f *forward) free() {
	for _, b := range f.bufs {
		f.b.Free(b)
	}
	f.bufs = nil
}

// vector uploads a 1-D tensor.
func (f *forward) vector(t *checkpoint.Tensor) (backend.Buffer, error) {
	start := time.Now()
	v, err := readRowsF32(t, 0, 1)
	if err != nil {
		return nil, err
	}
	f.out.WeightBytes += t.Size
	m := f.alloc(1, len(v))
	f.b.Upload(m.Buf, 0, v)
	f.out.LoadTime += time.Since(start)
	return m.Buf, nil
}

// matmul sets dst = x · tᵀ, loading t for the one product.
func (f *forward) matmul(dst, x backend.Mat, t *checkpoint.Tensor) error {
	hm, release, err := f.read(t)
	if err != nil {
		return err
	}
	w := f.b.LoadWeight(hm)
	f.b.MatMul(dst, x, w)
	f.b.FreeWeight(w)
	release()
	return nil
}

// read reads and decodes a weight matrix on the host, counting the time
// and bytes.
func (f *forward) read(t *checkpoint.Tensor) (backend.HostMatrix, func(), error) {
	if err := f.ctx.Err(); err != nil {
		return backend.HostMatrix{}, nil, err
	}
	start := time.Now()
	hm, release, err := readMatrix(t)
	if err != nil {
		return hm, nil, err
	}
	f.out.LoadTime += time.Since(start)
	f.out.WeightBytes += tensorBytes(t)
	return hm, release, nil
}

// tensorBytes is the checkpoint bytes of a weight, its scale included.
func tensorBytes(t *checkpoint.Tensor) int64 {
	if t.Scale != nil {
		return t.Size + t.Scale.Size
	}
	return t.Size
}

func (f *forward) run(hidden []float32) error {
	cfg, b, n := f.m.Config, f.b, f.n
	d := cfg.Hidden
	h := f.alloc(n, d)
	b.Upload(h.Buf, 0, hidden)

	attn, err := f.attention(h)
	if err != nil {
		return err
	}
	h1 := f.alloc(n, d)
	b.Add(h1, h, attn)
	norm, err := f.vector(f.ly.ffnNorm)
	if err != nil {
		return err
	}
	x := f.alloc(n, d)
	b.RMSNorm(x, h1, norm, float32(cfg.RMSNormEps))
	ffn := f.alloc(n, d)
	if f.out.MoE {
		err = f.moe(ffn, x)
	} else {
		err = f.mlp(ffn, x, f.ly.dense)
	}
	if err != nil {
		return err
	}
	out := f.alloc(n, d)
	b.Add(out, h1, ffn)

	f.out.AttnOut = make([]float32, n*d)
	f.out.FFNOut = make([]float32, n*d)
	f.out.HiddenOut = make([]float32, n*d)
	for _, dl := range []struct {
		dst []float32
		m   backend.Mat
	}{{f.out.AttnOut, attn}, {f.out.FFNOut, ffn}, {f.out.HiddenOut, out}} {
		if err := b.Download(dl.dst, dl.m.Buf, 0); err != nil {
			return err
		}
	}
	return nil
}

// attention is MLA in DeepSeek's absorbed form: the query's no-rope part
// is multiplied into the latent space by kv_b_proj's key half, every head
// attends over the cached [normalised latent | rotated k_pe] rows, and the
// result leaves the latent space through kv_b_proj's value half.
func (f *forward) attention(h backend.Mat) (backend.Mat, error) {
	cfg, b, n, ly := f.m.Config, f.b, f.n, f.ly
	nh, nope, rope, kvl, vd := cfg.Heads, cfg.QKNope, cfg.QKRope, cfg.KVLoRA, cfg.VHead
	qk := nope + rope
	norm, err := f.vector(ly.attnNorm)
	if err != nil {
		return backend.Mat{}, err
	}
	x := f.alloc(n, cfg.Hidden)
	b.RMSNorm(x, h, norm, float32(cfg.RMSNormEps))

	q := f.alloc(n, nh*qk)
	if cfg.QLoRA > 0 {
		qa := f.alloc(n, cfg.QLoRA)
		if err := f.matmul(qa, x, ly.wqA); err != nil {
			return backend.Mat{}, err
		}
		qn, err := f.vector(ly.qNorm)
		if err != nil {
			return backend.Mat{}, err
		}
		b.RMSNorm(qa, qa, qn, LatentNormEps)
		if err := f.matmul(q, qa, ly.wqB); err != nil {
			return backend.Mat{}, err
		}
	} else if err := f.matmul(q, x, ly.wq); err != nil {
		return backend.Mat{}, err
	}

	kva := f.alloc(n, kvl+rope)
	if err := f.matmul(kva, x, ly.wkvA); err != nil {
		return backend.Mat{}, err
	}
	// The cache row: [kv_a_layernorm(latent) | RoPE(k_pe)].
	kv := f.alloc(n, kvl+rope)
	kn, err := f.vector(ly.kvNorm)
	if err != nil {
		return backend.Mat{}, err
	}
	b.RMSNorm(kv.ColRange(0, kvl), kva.ColRange(0, kvl), kn, LatentNormEps)
	b.Copy(kv.ColRange(kvl, rope), kva.ColRange(kvl, rope))
	pos := make([]int, 0, n)
	for _, t := range f.lens {
		for p := range t {
			pos = append(pos, p)
		}
	}
	cosH, sinH := cfg.RopeTables(pos)
	cos, sin := f.alloc(n, rope/2), f.alloc(n, rope/2)
	b.Upload(cos.Buf, 0, cosH)
	b.Upload(sin.Buf, 0, sinH)
	b.RoPE(kv.ColRange(kvl, rope), cos.Buf, sin.Buf, 1)
	// One row per (token, head) of the query.
	qHeads := backend.Mat{Buf: q.Buf, Rows: n * nh, Cols: qk, Stride: qk}
	b.RoPE(qHeads.ColRange(nope, rope), cos.Buf, sin.Buf, nh)

	// kv_b_proj is [heads·(nope + v), kv_lora]: per head, nope key rows
	// then v value rows.
	start := time.Now()
	wkvb, err := readRowsF32(ly.wkvB, 0, int(ly.wkvB.Shape[0]))
	if err != nil {
		return backend.Mat{}, err
	}
	f.out.LoadTime += time.Since(start)
	f.out.WeightBytes += tensorBytes(ly.wkvB)
	qc := f.alloc(n*nh, kvl+rope) // [absorbed q_nope | q_pe] per (token, head)
	for hd := range nh {
		if err := f.ctx.Err(); err != nil {
			return backend.Mat{}, err
		}
		// Absorb: q_nope[t] · W_k[h] (W_k [nope, kv_lora]), written as a
		// product with W_kᵀ [kv_lora, nope].
		wk := make([]float32, kvl*nope)
		base := hd * (nope + vd) * kvl
		for i := range nope {
			for c := range kvl {
				wk[c*nope+i] = wkvb[base+i*kvl+c]
			}
		}
		w := b.LoadWeight(backend.HostMatrix{Rows: kvl, Cols: nope, F32: wk})
		dst := backend.Mat{Buf: qc.Buf, Off: hd * (kvl + rope), Rows: n, Cols: kvl, Stride: nh * (kvl + rope)}
		src := backend.Mat{Buf: q.Buf, Off: hd * qk, Rows: n, Cols: nope, Stride: nh * qk}
		b.MatMul(dst, src, w)
		b.FreeWeight(w)
	}
	b.Copy(qc.ColRange(kvl, rope), qHeads.ColRange(nope, rope))

	kvLat := make([]float32, n*(kvl+rope))
	f.out.KVA = make([]float32, n*(kvl+rope))
	if err := b.Download(f.out.KVA, kva.Buf, 0); err != nil {
		return backend.Mat{}, err
	}
	if err := b.Download(kvLat, kv.Buf, 0); err != nil {
		return backend.Mat{}, err
	}
	f.out.KVLatent = make([]float32, n*kvl)
	f.out.KPE = make([]float32, n*rope)
	for t := range n {
		copy(f.out.KVLatent[t*kvl:], kvLat[t*(kvl+rope):t*(kvl+rope)+kvl])
		copy(f.out.KPE[t*rope:], kvLat[t*(kvl+rope)+kvl:(t+1)*(kvl+rope)])
	}

	ctxLat := f.alloc(n*nh, kvl)
	scale := float32(cfg.SoftmaxScale())
	r0 := 0
	for _, t := range f.lens {
		if err := f.ctx.Err(); err != nil {
			return backend.Mat{}, err
		}
		b.Attention(ctxLat.RowRange(r0*nh, t*nh), qc.RowRange(r0*nh, t*nh), kv.RowRange(r0, t), nh, scale)
		r0 += t
	}

	o := f.alloc(n, nh*vd)
	for hd := range nh {
		if err := f.ctx.Err(); err != nil {
			return backend.Mat{}, err
		}
		base := (hd*(nope+vd) + nope) * kvl
		w := b.LoadWeight(backend.HostMatrix{Rows: vd, Cols: kvl, F32: wkvb[base : base+vd*kvl]})
		dst := backend.Mat{Buf: o.Buf, Off: hd * vd, Rows: n, Cols: vd, Stride: nh * vd}
		src := backend.Mat{Buf: ctxLat.Buf, Off: hd * kvl, Rows: n, Cols: kvl, Stride: nh * kvl}
		b.MatMul(dst, src, w)
		b.FreeWeight(w)
	}
	attn := f.alloc(n, cfg.Hidden)
	if err := f.matmul(attn, o, ly.wo); err != nil {
		return backend.Mat{}, err
	}
	return attn, nil
}

// mlp sets dst = w2(silu(w1 x) ⊙ w3 x) for the projections w (w1, w2, w3).
func (f *forward) mlp(dst, x backend.Mat, w [3]*checkpoint.Tensor) error {
	var hm [3]backend.HostMatrix
	for i, t := range w {
		m, release, err := f.read(t)
		if err != nil {
			return err
		}
		defer release()
		hm[i] = m
	}
	f.mlpOn(dst, x, hm)
	return nil
}

// mlpOn is mlp on matrices already read.
func (f *forward) mlpOn(dst, x backend.Mat, hm [3]backend.HostMatrix) {
	b := f.b
	inter := hm[0].Rows
	g := b.Alloc(x.Rows * inter)
	u := b.Alloc(x.Rows * inter)
	gm, um := backend.Whole(g, x.Rows, inter), backend.Whole(u, x.Rows, inter)
	product := func(dst, x backend.Mat, hm backend.HostMatrix) {
		w := b.LoadWeight(hm)
		b.MatMul(dst, x, w)
		b.FreeWeight(w)
	}
	product(gm, x, hm[0])
	product(um, x, hm[2])
	b.SiLUMul(gm, gm, um)
	product(dst, gm, hm[1])
	b.Free(g)
	b.Free(u)
}

// route chooses every token's experts from the router logits: on the
// backend when it is a Router, else on the host.
func (f *forward) route(logits backend.Mat, bias []float32) (Routes, error) {
	cfg := f.m.Config
	if r, ok := f.b.(Router); ok {
		var bb backend.Buffer
		if bias != nil {
			bb = f.alloc(1, len(bias)).Buf
			f.b.Upload(bb, 0, bias)
		}
		return r.Route(logits, bb, cfg)
	}
	host := make([]float32, logits.Rows*logits.Cols)
	if err := f.b.Download(host, logits.Buf, 0); err != nil {
		return Routes{}, err
	}
	return cfg.route(host, bias), nil
}

// expertLoad is a routed expert's matrices, read ahead of their use.
type expertLoad struct {
	e       int
	m       [3]backend.HostMatrix
	release []func()
	time    time.Duration
	bytes   int64
	err     error
}

// readExperts reads the matrices of the experts es in order on a
// goroutine of its own, one expert ahead of the caller, so that reading
// overlaps the arithmetic. The caller must drain the channel; stop ends
// the reading early.
func (f *forward) readExperts(es []int, stop <-chan struct{}) <-chan expertLoad {
	ch := make(chan expertLoad, 1)
	go func() {
		defer close(ch)
		for _, e := range es {
			ld := expertLoad{e: e}
			start := time.Now()
			for i, t := range f.ly.experts[e] {
				if ld.err = f.ctx.Err(); ld.err != nil {
					break
				}
				var release func()
				ld.m[i], release, ld.err = readMatrix(t)
				if ld.err != nil {
					break
				}
				ld.release = append(ld.release, release)
				ld.bytes += tensorBytes(t)
			}
			ld.time = time.Since(start)
			select {
			case ch <- ld:
			case <-stop:
				ld.free()
				return
			}
			if ld.err != nil {
				return
			}
		}
	}()
	return ch
}

func (ld *expertLoad) free() {
	for _, r := range ld.release {
		r()
	}
}

// moe routes every token to its experts and sets dst to the weighted sum
// of their outputs plus the shared experts' output. Experts are summed in
// index order into a zeroed buffer, then the shared output is added, as
// model.py does.
func (f *forward) moe(dst, x backend.Mat) error {
	cfg, b, n := f.m.Config, f.b, f.n
	ly := f.ly
	logits := f.alloc(n, cfg.RoutedExperts)
	if err := f.matmul(logits, x, ly.gate); err != nil {
		return err
	}
	var bias []float32
	if ly.bias != nil {
		var err error
		if bias, err = readRowsF32(ly.bias, 0, 1); err != nil {
			return err
		}
		f.out.WeightBytes += ly.bias.Size
	}
	r, err := f.route(logits, bias)
	if err != nil {
		return err
	}
	f.out.Routes = &r

	// Tokens of each expert, in token order, with their weights.
	rows := make([][]int32, cfg.RoutedExperts)
	weights := make([][]float32, cfg.RoutedExperts)
	var used []int
	for t := range n {
		for j := range r.K {
			e := r.IDs[t*r.K+j]
			rows[e] = append(rows[e], int32(t))
			weights[e] = append(weights[e], r.Weights[t*r.K+j])
		}
	}
	for e, idx := range rows {
		if len(idx) > 0 {
			used = append(used, e)
		}
	}
	f.out.ExpertsRun = len(used)
	y := f.alloc(n, cfg.Hidden)
	stop := make(chan struct{})
	loads := f.readExperts(used, stop)
	defer func() {
		close(stop)
		for ld := range loads {
			ld.free()
		}
	}()
	for ld := range loads {
		f.out.LoadTime += ld.time
		f.out.WeightBytes += ld.bytes
		if ld.err == nil {
			ld.err = f.ctx.Err()
		}
		if ld.err != nil {
			ld.free()
			return ld.err
		}
		idx := rows[ld.e]
		xe := b.Alloc(len(idx) * cfg.Hidden)
		ye := b.Alloc(len(idx) * cfg.Hidden)
		xm, ym := backend.Whole(xe, len(idx), cfg.Hidden), backend.Whole(ye, len(idx), cfg.Hidden)
		b.Gather(xm, x, idx)
		f.mlpOn(ym, xm, ld.m)
		b.ScatterAdd(y, ym, idx, weights[ld.e])
		b.Free(xe)
		b.Free(ye)
		ld.free()
	}
	if cfg.SharedExperts == 0 {
		b.Copy(dst, y)
		return nil
	}
	z := f.alloc(n, cfg.Hidden)
	if err := f.mlp(z, x, ly.shared); err != nil {
		return err
	}
	b.Add(dst, y, z)
	return nil
}

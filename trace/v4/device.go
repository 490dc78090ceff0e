package v4

import (
	"context"
	"math"

	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/trace/backend"
)

// SetBackend makes the forwards that follow run their matrix products
// (and, where b implements backend.V4Ops, V4's own operations) on b; nil, the
// default, runs everything on the host. Like b, the model then serves
// one forward at a time.
func (m *Model) SetBackend(b backend.Backend) { m.backend = b }

// Backend is the backend SetBackend set, nil for the host engine.
func (m *Model) Backend() backend.Backend { return m.backend }

// device runs a forward's work on a backend.Backend.
type device struct {
	b     backend.Backend
	ops   backend.V4Ops  // nil when b has none
	ops41 backend.V41Ops // nil when b has none
}

func newDevice(b backend.Backend) *device {
	if b == nil {
		return nil
	}
	d := &device{b: b}
	d.ops, _ = b.(backend.V4Ops)
	d.ops41, _ = b.(backend.V41Ops)
	return d
}

// upload copies v into a new buffer of b.
func (d *device) upload(v []float32) backend.Buffer {
	buf := d.b.Alloc(len(v))
	d.b.Upload(buf, 0, v)
	return buf
}

// host returns w as the backend loads it: BF16 bits when every value is
// one exactly (MXFP4 values and FP8 ones with power-of-two scales always
// are), which halves what crosses to a device, else float32.
func (w *linear) host() backend.HostMatrix {
	hm := backend.HostMatrix{Rows: w.rows, Cols: w.cols}
	if w.h != nil {
		hm.BF16 = w.h
		return hm
	}
	v := w.floats()
	h := make([]uint16, len(v))
	for i, f := range v {
		b := math.Float32bits(f)
		if b&0xffff != 0 {
			hm.F32 = v
			return hm
		}
		h[i] = uint16(b >> 16)
	}
	hm.BF16 = h
	return hm
}

// applyOn is apply with the product (and the a8 quantisation of x, where
// the backend has backend.V4Ops) on d's backend.
func (w *linear) applyOn(ctx context.Context, d *device, x []float32, m int, a8 bool) ([]float32, error) {
	b := d.b
	quant := a8 && w.quant
	blk := w.actBlock()
	if quant && w.cols%blk != 0 {
		return nil, errActBlock(w.cols, blk)
	}
	in := x
	if quant && d.ops == nil {
		in = append([]float32(nil), x...)
		simd.QuantE4M3(in, blk)
	}
	out := make([]float32, m*w.rows)
	if m == 0 || w.rows == 0 {
		return out, nil
	}
	if c, ok := b.(backend.Cancellable); ok {
		c.SetContext(ctx)
		defer c.SetContext(nil)
	}
	wt := b.LoadWeight(w.host())
	defer b.FreeWeight(wt)
	xb := d.upload(in)
	defer b.Free(xb)
	xm := backend.Whole(xb, m, w.cols)
	if quant && d.ops != nil {
		d.ops.ActQuant(xm, blk, false)
	}
	ob := b.Alloc(m * w.rows)
	defer b.Free(ob)
	b.MatMul(backend.Whole(ob, m, w.rows), xm, wt)
	if err := b.Download(out, ob, 0); err != nil {
		return nil, err
	}
	return out, ctx.Err()
}

// rotateFP4 is the indexer's Hadamard rotation and FP4 fake-quant of
// each row of x (rows of n values).
func (f *forward) rotateFP4(x []float32, n int, scale float32) error {
	if f.dev == nil || f.dev.ops == nil {
		for r := 0; r < len(x); r += n {
			simd.Hadamard(x[r:r+n], scale)
			simd.QuantE2M1(x[r:r+n], fp4Block)
		}
		return nil
	}
	d := f.dev
	buf := d.upload(x)
	defer d.b.Free(buf)
	xm := backend.Whole(buf, len(x)/n, n)
	d.ops.Hadamard(xm, scale)
	d.ops.ActQuant(xm, fp4Block, true)
	return d.b.Download(x, buf, 0)
}

// attend runs sparseAttention, on the device where it has backend.V4Ops.
func (f *forward) attend(o, q, kv, sink []float32, idx []int32, k, heads, hd int, scale float32) error {
	if f.dev == nil || f.dev.ops == nil || len(idx) == 0 {
		return sparseAttention(f.ctx, o, q, kv, sink, idx, k, heads, hd, scale)
	}
	d := f.dev
	T := len(idx) / max(k, 1)
	qb, kvb, sb := d.upload(q), d.upload(kv), d.upload(sink)
	ob := d.b.Alloc(len(o))
	defer func() {
		for _, b := range []backend.Buffer{qb, kvb, sb, ob} {
			d.b.Free(b)
		}
	}()
	d.ops.SparseAttention(backend.Whole(ob, T*heads, hd), backend.Whole(qb, T*heads, hd), backend.Whole(kvb, len(kv)/hd, hd), sb, idx, k, heads, scale)
	if err := d.b.Download(o, ob, 0); err != nil {
		return err
	}
	return f.ctx.Err()
}

// actQuant fake-quantises x per block of block values (to E2M1 when
// fp4, else E4M3, with power-of-two scales): simd's quantiser on the
// host, backend.V4Ops.ActQuant where the backend has it. The blocks lie
// along rows of any width that block divides.
func (f *forward) actQuant(x []float32, block int, fp4 bool) error {
	if f.dev == nil || f.dev.ops == nil || len(x) == 0 {
		if fp4 {
			simd.QuantE2M1(x, block)
		} else {
			simd.QuantE4M3(x, block)
		}
		return nil
	}
	d := f.dev
	buf := d.upload(x)
	defer d.b.Free(buf)
	d.ops.ActQuant(backend.Whole(buf, len(x)/block, block), block, fp4)
	return d.b.Download(x, buf, 0)
}

// fp4E4M3 is FP4QuantE4M3 of x per block of block values, on the device
// where the backend has backend.V41Ops.
func (f *forward) fp4E4M3(x []float32, block int) error {
	if f.dev == nil || f.dev.ops41 == nil || len(x) == 0 {
		FP4QuantE4M3(x, block)
		return nil
	}
	d := f.dev
	buf := d.upload(x)
	defer d.b.Free(buf)
	d.ops41.FP4QuantE4M3(backend.Whole(buf, len(x)/block, block), block)
	return d.b.Download(x, buf, 0)
}

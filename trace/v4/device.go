package v4

import (
	"context"
	"math"

	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/trace/model"
)

// DeviceOps are V4's own operations that a model.Backend may run where
// its buffers are (the cuda backend does); on a backend without them the
// forward runs them on the host. Each works in place or into out as the
// host function does (simd.QuantE4M3 and QuantE2M1, simd.Hadamard,
// sparseAttention).
type DeviceOps interface {
	// ActQuant fake-quantises each row of x per block of block values:
	// to FP8 E4M3, or FP4 E2M1 when fp4, with power-of-two scales.
	ActQuant(x model.Mat, block int, fp4 bool)
	// Hadamard applies the Walsh-Hadamard transform to each row of x
	// (a power-of-two width) and multiplies by scale.
	Hadamard(x model.Mat, scale float32)
	// SparseAttention is kernel.py's sparse_attn with the per-head sink:
	// out and q [T·heads, d], kv [rows, d] (K = V), sink [heads], idx
	// [T, k] rows of kv (-1 = none).
	SparseAttention(out, q, kv model.Mat, sink model.Buffer, idx []int32, k, heads int, scale float32)
}

// SetBackend makes the forwards that follow run their matrix products
// (and, where b implements DeviceOps, V4's own operations) on b; nil, the
// default, runs everything on the host. Like b, the model then serves
// one forward at a time.
func (m *Model) SetBackend(b model.Backend) { m.backend = b }

// Backend is the backend SetBackend set, nil for the host engine.
func (m *Model) Backend() model.Backend { return m.backend }

// device runs a forward's work on a model.Backend.
type device struct {
	b   model.Backend
	ops DeviceOps // nil when b has none
}

func newDevice(b model.Backend) *device {
	if b == nil {
		return nil
	}
	d := &device{b: b}
	d.ops, _ = b.(DeviceOps)
	return d
}

// upload copies v into a new buffer of b.
func (d *device) upload(v []float32) model.Buffer {
	buf := d.b.Alloc(len(v))
	d.b.Upload(buf, 0, v)
	return buf
}

// host returns w as the backend loads it: BF16 bits when every value is
// one exactly (MXFP4 values and FP8 ones with power-of-two scales always
// are), which halves what crosses to a device, else float32.
func (w *linear) host() model.HostMatrix {
	hm := model.HostMatrix{Rows: w.rows, Cols: w.cols}
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
// the backend has DeviceOps) on d's backend.
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
	if c, ok := b.(model.Cancellable); ok {
		c.SetContext(ctx)
		defer c.SetContext(nil)
	}
	wt := b.LoadWeight(w.host())
	defer b.FreeWeight(wt)
	xb := d.upload(in)
	defer b.Free(xb)
	xm := model.Whole(xb, m, w.cols)
	if quant && d.ops != nil {
		d.ops.ActQuant(xm, blk, false)
	}
	ob := b.Alloc(m * w.rows)
	defer b.Free(ob)
	b.MatMul(model.Whole(ob, m, w.rows), xm, wt)
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
	xm := model.Whole(buf, len(x)/n, n)
	d.ops.Hadamard(xm, scale)
	d.ops.ActQuant(xm, fp4Block, true)
	return d.b.Download(x, buf, 0)
}

// attend runs sparseAttention, on the device where it has DeviceOps.
func (f *forward) attend(o, q, kv, sink []float32, idx []int32, k, heads, hd int, scale float32) error {
	if f.dev == nil || f.dev.ops == nil {
		return sparseAttention(f.ctx, o, q, kv, sink, idx, k, heads, hd, scale)
	}
	d := f.dev
	T := len(idx) / max(k, 1)
	qb, kvb, sb := d.upload(q), d.upload(kv), d.upload(sink)
	ob := d.b.Alloc(len(o))
	defer func() {
		for _, b := range []model.Buffer{qb, kvb, sb, ob} {
			d.b.Free(b)
		}
	}()
	d.ops.SparseAttention(model.Whole(ob, T*heads, hd), model.Whole(qb, T*heads, hd), model.Whole(kvb, len(kv)/hd, hd), sb, idx, k, heads, scale)
	if err := d.b.Download(o, ob, 0); err != nil {
		return err
	}
	return f.ctx.Err()
}

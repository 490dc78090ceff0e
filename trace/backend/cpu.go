package backend

import (
	"context"
	"fmt"
	"math"
	"runtime"

	"github.com/dsfs/dsfs/simd"
)

// CPU is the host Backend: buffers are Go slices and the matrix products
// run on simd's kernels over every core. Operations run synchronously; the
// only error Sync and Download report is cancellation (see SetContext).
type CPU struct {
	// ctx is checked between blocks of the long operations; nil: never.
	ctx context.Context
	// err is ctx's error once an operation stopped early.
	err error
}

// cancelWork is the most multiply-adds a matrix product or an attention
// pass does between two looks at the context: about 0.1 s on one core, so
// a cancelled read is answered promptly however long the prompt.
const cancelWork = 1 << 28

// SetContext implements Cancellable.
func (c *CPU) SetContext(ctx context.Context) { c.ctx, c.err = ctx, nil }

// stopped reports whether the context is done, remembering its error.
func (c *CPU) stopped() bool {
	if c.err == nil && c.ctx != nil {
		c.err = c.ctx.Err()
	}
	return c.err != nil
}

// NewCPU returns the CPU backend.
func NewCPU() *CPU { return &CPU{} }

// Name implements Backend.
func (*CPU) Name() string { return "cpu" }

// Device implements Backend: the CPU model, its cores and the matrix
// kernel in use.
func (*CPU) Device() string {
	return fmt.Sprintf("%s, %d threads, %s kernel", cpuModel(), runtime.GOMAXPROCS(0), simd.Kernel())
}

type cpuBuffer struct{ v []float32 }

func (b *cpuBuffer) Len() int { return len(b.v) }

// cpuWeight holds a matrix as float32, or as the checkpoint's BF16 bits,
// which simd multiplies without widening them first.
type cpuWeight struct {
	rows, cols int
	v          []float32
	h          []uint16
}

func (w *cpuWeight) Rows() int { return w.rows }
func (w *cpuWeight) Cols() int { return w.cols }

func vals(b Buffer) []float32 { return b.(*cpuBuffer).v }

// view returns the backing slice of m starting at its first element.
func view(m Mat) []float32 {
	v := vals(m.Buf)
	if m.Rows == 0 {
		return nil
	}
	end := m.Off + (m.Rows-1)*m.Stride + m.Cols
	if m.Off < 0 || m.Cols > m.Stride && m.Rows > 1 || end > len(v) {
		panic(fmt.Sprintf("model: view %+v outside a buffer of %d values", m, len(v)))
	}
	return v[m.Off:end]
}

// rows calls fn for every row of m.
func rows(m Mat, fn func(i int, row []float32)) {
	v := view(m)
	for i := range m.Rows {
		fn(i, v[i*m.Stride:i*m.Stride+m.Cols])
	}
}

func sameShape(op string, a, b Mat) {
	if a.Rows != b.Rows || a.Cols != b.Cols {
		panic(fmt.Sprintf("model: %s of %dx%d and %dx%d", op, a.Rows, a.Cols, b.Rows, b.Cols))
	}
}

// Alloc implements Backend.
func (*CPU) Alloc(n int) Buffer { return &cpuBuffer{v: make([]float32, n)} }

// Upload implements Backend.
func (*CPU) Upload(b Buffer, off int, src []float32) { copy(vals(b)[off:off+len(src)], src) }

// Download implements Backend.
func (c *CPU) Download(dst []float32, b Buffer, off int) error {
	copy(dst, vals(b)[off:off+len(dst)])
	return c.err
}

// Free implements Backend; the garbage collector reclaims the slice.
func (*CPU) Free(b Buffer) { b.(*cpuBuffer).v = nil }

// LoadWeight implements Backend: the host matrix is used in place.
func (*CPU) LoadWeight(m HostMatrix) Weight {
	w := &cpuWeight{rows: m.Rows, cols: m.Cols, v: m.F32, h: m.BF16}
	if len(w.v)+len(w.h) != m.Rows*m.Cols {
		panic(fmt.Sprintf("model: weight of %d values for %dx%d", len(w.v)+len(w.h), m.Rows, m.Cols))
	}
	return w
}

// FreeWeight implements Backend.
func (*CPU) FreeWeight(w Weight) {
	cw := w.(*cpuWeight)
	cw.v, cw.h = nil, nil
}

// MatMul implements Backend, in tiles of at most about cancelWork
// multiply-adds with a look at the context before each. Tiles are whole
// multiples of simd's cut (12 rows, 12 columns), so every value is summed
// as an uncut product sums it.
func (c *CPU) MatMul(dst, x Mat, w Weight) {
	cw := w.(*cpuWeight)
	if dst.Rows != x.Rows || dst.Cols != cw.rows || x.Cols != cw.cols {
		panic(fmt.Sprintf("model: MatMul %dx%d = %dx%d · (%dx%d)ᵀ", dst.Rows, dst.Cols, x.Rows, x.Cols, cw.rows, cw.cols))
	}
	if x.Rows == 0 || cw.rows == 0 {
		return
	}
	const grain = 48
	m, n, k := x.Rows, cw.rows, max(cw.cols, 1)
	cols := n
	if grain*n*k > cancelWork {
		cols = min(n, max(grain, cancelWork/(grain*k)/grain*grain))
	}
	rows := min(m, max(grain, cancelWork/(cols*k)/grain*grain))
	d, xv := view(dst), view(x)
	for r0 := 0; r0 < m; r0 += rows {
		r := min(rows, m-r0)
		for c0 := 0; c0 < n; c0 += cols {
			if c.stopped() {
				return
			}
			nc := min(cols, n-c0)
			dd, xx := d[r0*dst.Stride+c0:], xv[r0*x.Stride:]
			if cw.h != nil {
				simd.MatMulTBF16(dd, dst.Stride, xx, x.Stride, cw.h[c0*cw.cols:], cw.cols, r, nc, cw.cols)
			} else {
				simd.MatMulT(dd, dst.Stride, xx, x.Stride, cw.v[c0*cw.cols:], cw.cols, r, nc, cw.cols)
			}
		}
	}
}

// RMSNorm implements Backend, in float32 as the reference does.
func (*CPU) RMSNorm(dst, x Mat, weight Buffer, eps float32) {
	sameShape("RMSNorm", dst, x)
	w := vals(weight)[:x.Cols]
	d := view(dst)
	rows(x, func(i int, row []float32) {
		ms := simd.Dot(row, row) / float32(len(row))
		r := float32(1 / math.Sqrt(float64(ms+eps)))
		out := d[i*dst.Stride : i*dst.Stride+dst.Cols]
		for j, v := range row {
			out[j] = v * r * w[j]
		}
	})
}

// RoPE implements Backend.
func (*CPU) RoPE(x Mat, cos, sin Buffer, group int) {
	half := x.Cols / 2
	c, s := vals(cos), vals(sin)
	rows(x, func(i int, row []float32) {
		p := i / group * half
		for k := range half {
			a, b := row[2*k], row[2*k+1]
			row[2*k] = a*c[p+k] - b*s[p+k]
			row[2*k+1] = a*s[p+k] + b*c[p+k]
		}
	})
}

// attentionChunk bounds the score matrix of one pass, in values.
const attentionChunk = 1 << 22

// Attention implements Backend: scores by one matrix product over every
// (token, head) row, masked softmax, then the weighted sum of values as a
// second product against the transposed values. Passes are cut to about
// cancelWork multiply-adds, with a look at the context before each.
func (cpu *CPU) Attention(out, q, kv Mat, heads int, scale float32) {
	t := kv.Rows
	dv := out.Cols
	if q.Rows != t*heads || out.Rows != q.Rows || q.Cols != kv.Cols || dv > kv.Cols {
		panic(fmt.Sprintf("model: Attention of q %dx%d, kv %dx%d, out %dx%d, %d heads", q.Rows, q.Cols, kv.Rows, kv.Cols, out.Rows, out.Cols, heads))
	}
	if t == 0 {
		return
	}
	vt := make([]float32, dv*t) // values, transposed: [dv, t]
	rows(kv, func(i int, row []float32) {
		for j := range dv {
			vt[j*t+i] = row[j]
		}
	})
	perRow := t * (q.Cols + dv)                                               // multiply-adds of one score row and its values
	chunk := max(heads, min(attentionChunk/t, cancelWork/perRow)/heads*heads) // whole tokens
	scores := make([]float32, min(chunk, q.Rows)*t)
	kvv, qv, ov := view(kv), view(q), view(out)
	for r0 := 0; r0 < q.Rows; r0 += chunk {
		if cpu.stopped() {
			return
		}
		nr := min(chunk, q.Rows-r0)
		sc := scores[:nr*t]
		simd.MatMulT(sc, t, qv[r0*q.Stride:], q.Stride, kvv, kv.Stride, nr, t, q.Cols)
		for i := range nr {
			row := sc[i*t : (i+1)*t]
			softmaxCausal(row, (r0+i)/heads+1, scale)
		}
		simd.MatMulT(ov[r0*out.Stride:], out.Stride, sc, t, vt, t, nr, dv, t)
	}
}

// softmaxCausal replaces row with softmax(scale · row[:n]) and zeros past n.
func softmaxCausal(row []float32, n int, scale float32) {
	mx := float32(math.Inf(-1))
	for _, v := range row[:n] {
		mx = max(mx, v*scale)
	}
	var sum float32
	for i, v := range row[:n] {
		e := float32(math.Exp(float64(v*scale - mx)))
		row[i] = e
		sum += e
	}
	for i := range row[:n] {
		row[i] /= sum
	}
	clear(row[n:])
}

// SiLUMul implements Backend.
func (*CPU) SiLUMul(dst, gate, up Mat) {
	sameShape("SiLUMul", dst, gate)
	sameShape("SiLUMul", dst, up)
	g, u, d := view(gate), view(up), view(dst)
	for i := range dst.Rows {
		gr, ur, dr := g[i*gate.Stride:][:dst.Cols], u[i*up.Stride:][:dst.Cols], d[i*dst.Stride:][:dst.Cols]
		for j, x := range gr {
			dr[j] = x / float32(1+math.Exp(-float64(x))) * ur[j]
		}
	}
}

// Add implements Backend.
func (*CPU) Add(dst, a, b Mat) {
	sameShape("Add", dst, a)
	sameShape("Add", dst, b)
	av, bv, d := view(a), view(b), view(dst)
	for i := range dst.Rows {
		ar, br, dr := av[i*a.Stride:][:dst.Cols], bv[i*b.Stride:][:dst.Cols], d[i*dst.Stride:][:dst.Cols]
		for j := range dr {
			dr[j] = ar[j] + br[j]
		}
	}
}

// Copy implements Backend.
func (*CPU) Copy(dst, src Mat) {
	sameShape("Copy", dst, src)
	s, d := view(src), view(dst)
	for i := range dst.Rows {
		copy(d[i*dst.Stride:][:dst.Cols], s[i*src.Stride:][:src.Cols])
	}
}

// Gather implements Backend.
func (*CPU) Gather(dst, src Mat, idx []int32) {
	s, d := view(src), view(dst)
	for i, r := range idx {
		copy(d[i*dst.Stride:][:dst.Cols], s[int(r)*src.Stride:][:src.Cols])
	}
}

// ScatterAdd implements Backend: each product is rounded before the sum,
// as y[idx] += out · w does in torch.
func (*CPU) ScatterAdd(dst, src Mat, idx []int32, scale []float32) {
	s, d := view(src), view(dst)
	for i, r := range idx {
		sr, dr := s[i*src.Stride:][:src.Cols], d[int(r)*dst.Stride:][:dst.Cols]
		w := scale[i]
		for j, v := range sr {
			p := v * w
			dr[j] += p
		}
	}
}

// Sync implements Backend.
func (c *CPU) Sync() error {
	err := c.err
	c.err = nil
	return err
}

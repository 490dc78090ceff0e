package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dsfs/dsfs/trace/backend"
)

// Alloc implements backend.Backend.
func (b *Backend) Alloc(n int) backend.Buffer {
	defer b.enter()()
	buf := &buffer{n: n}
	if buf.ptr = b.devAlloc(4 * uint64(n)); buf.ptr != 0 {
		b.fail(b.rt.drv.check("cuMemsetD32Async", b.rt.drv.cuMemsetD32Async(buf.ptr, 0, uint64(n), b.stream)))
	}
	return buf
}

// Free implements backend.Backend.
func (b *Backend) Free(x backend.Buffer) {
	buf := devBuffer(x)
	b.devFree(buf.ptr, 4*uint64(buf.n))
	buf.ptr, buf.n = 0, 0
}

// Upload implements backend.Backend.
func (b *Backend) Upload(x backend.Buffer, off int, src []float32) {
	buf := devBuffer(x)
	if off < 0 || off+len(src) > buf.n {
		panic(fmt.Sprintf("cuda: upload of %d values at %d into a buffer of %d", len(src), off, buf.n))
	}
	defer b.enter()()
	p, n := hostBytes(src)
	b.upload(buf.ptr+4*uint64(off), p, n)
}

// Download implements backend.Backend.
func (b *Backend) Download(dst []float32, x backend.Buffer, off int) error {
	buf := devBuffer(x)
	if off < 0 || off+len(dst) > buf.n {
		panic(fmt.Sprintf("cuda: download of %d values at %d from a buffer of %d", len(dst), off, buf.n))
	}
	defer b.enter()()
	p, n := hostBytes(dst)
	return b.download(p, buf.ptr+4*uint64(off), n)
}

// LoadWeight implements backend.Backend. It copies the matrix to the device
// as it comes (BF16 bits or float32, whichever is smaller to send) and
// converts it there to the precision of the products.
func (b *Backend) LoadWeight(m backend.HostMatrix) backend.Weight {
	n := m.Rows * m.Cols
	if got := len(m.F32) + len(m.BF16); got != n || m.F32 != nil && m.BF16 != nil {
		panic(fmt.Sprintf("cuda: weight of %d values for %dx%d", got, m.Rows, m.Cols))
	}
	defer b.enter()()
	w := &weight{rows: m.Rows, cols: m.Cols, bf16: b.opt.Precision == BF16}
	w.ptr = b.devAlloc(w.bytes())
	switch {
	case m.BF16 != nil && w.bf16:
		p, sz := hostBytes(m.BF16)
		b.upload(w.ptr, p, sz)
	case m.BF16 != nil:
		p, sz := hostBytes(m.BF16)
		t := b.temp(p, sz)
		b.each(kWiden, n, w.ptr, t, int64(n))
		b.devFree(t, sz)
	case w.bf16:
		p, sz := hostBytes(m.F32)
		t := b.temp(p, sz)
		b.each(kNarrow, n, w.ptr, m.Cols, t, m.Cols, m.Rows, m.Cols)
		b.devFree(t, sz)
	default:
		p, sz := hostBytes(m.F32)
		b.upload(w.ptr, p, sz)
	}
	return w
}

// FreeWeight implements backend.Backend.
func (b *Backend) FreeWeight(x backend.Weight) {
	w := devWeight(x)
	b.devFree(w.ptr, w.bytes())
	w.ptr = 0
}

// operand is a matrix for cuBLAS, which is column-major: a row-major
// matrix with row stride ld is the column-major transpose with leading
// dimension ld.
type operand struct {
	ptr  uint64
	ld   int
	bf16 bool
}

// gemm sets the column-major m×n float32 matrix at c (leading dimension
// ldc) to op(A)·op(B), op transposing where ta or tb is cublasOpT. With
// BF16 precision, float32 operands are rounded to bfloat16 first.
func (b *Backend) gemm(ta, tb int32, m, n, k int, a, bo operand, c uint64, ldc int) {
	if b.err != nil || m == 0 || n == 0 {
		return
	}
	bl := b.rt.blas
	one, zero := float32(1), float32(0)
	if b.opt.Precision == FP32 {
		b.fail(bl.check("cublasSgemm_v2", bl.cublasSgemm(b.blas, ta, tb, int32(m), int32(n), int32(k),
			&one, a.ptr, int32(a.ld), bo.ptr, int32(bo.ld), &zero, c, int32(ldc))))
		return
	}
	// The stored shape of each operand in row-major terms: op(A) is m×k,
	// op(B) is k×n.
	ar, ac := k, m
	if ta == cublasOpT {
		ar, ac = m, k
	}
	br, bc := n, k
	if tb == cublasOpT {
		br, bc = k, n
	}
	if !a.bf16 {
		a = b.narrow(a, ar, ac)
		defer b.devFree(a.ptr, 2*uint64(ar*ac))
	}
	if !bo.bf16 {
		bo = b.narrow(bo, br, bc)
		defer b.devFree(bo.ptr, 2*uint64(br*bc))
	}
	b.fail(bl.check("cublasGemmEx", bl.cublasGemmEx(b.blas, ta, tb, int32(m), int32(n), int32(k),
		unsafe.Pointer(&one), a.ptr, cudaR16BF, int32(a.ld), bo.ptr, cudaR16BF, int32(bo.ld),
		unsafe.Pointer(&zero), c, cudaR32F, int32(ldc), cublasCompute32F, cublasGemmDefault)))
}

// narrow rounds the float32 matrix [rows, cols] of x to a new, packed
// bfloat16 operand.
func (b *Backend) narrow(x operand, rows, cols int) operand {
	p := b.devAlloc(2 * uint64(rows*cols))
	b.each(kNarrow, rows*cols, p, cols, x.ptr, x.ld, rows, cols)
	return operand{ptr: p, ld: cols, bf16: true}
}

// MatMul implements backend.Backend. Row-major dst = x·wᵀ is, column-major,
// dstᵀ = w·xᵀ, where w's rows stored row-major are the columns of a
// column-major [cols, rows] matrix, hence transposed.
func (b *Backend) MatMul(dst, x backend.Mat, w backend.Weight) {
	cw := devWeight(w)
	if dst.Rows != x.Rows || dst.Cols != cw.rows || x.Cols != cw.cols {
		panic(fmt.Sprintf("cuda: MatMul %dx%d = %dx%d · (%dx%d)ᵀ", dst.Rows, dst.Cols, x.Rows, x.Cols, cw.rows, cw.cols))
	}
	d, xp := at(dst), at(x)
	defer b.enter()()
	b.gemm(cublasOpT, cublasOpN, cw.rows, x.Rows, cw.cols,
		operand{ptr: cw.ptr, ld: cw.cols, bf16: cw.bf16}, operand{ptr: xp, ld: x.Stride}, d, dst.Stride)
}

// RMSNorm implements backend.Backend.
func (b *Backend) RMSNorm(dst, x backend.Mat, w backend.Buffer, eps float32) {
	sameShape("RMSNorm", dst, x)
	if devBuffer(w).n < x.Cols {
		panic(fmt.Sprintf("cuda: RMSNorm of %d columns with %d weights", x.Cols, w.Len()))
	}
	d, xp := at(dst), at(x)
	defer b.enter()()
	if x.Cols > 0 {
		b.launch(kRMSNorm, x.Rows, threads, d, dst.Stride, xp, x.Stride, devBuffer(w).ptr, x.Cols, eps)
	}
}

// RoPE implements backend.Backend.
func (b *Backend) RoPE(x backend.Mat, cos, sin backend.Buffer, group int) {
	half := x.Cols / 2
	need := (x.Rows + group - 1) / group * half
	if x.Cols%2 != 0 || group < 1 || cos.Len() < need || sin.Len() < need {
		panic(fmt.Sprintf("cuda: RoPE of %dx%d, group %d, tables of %d and %d", x.Rows, x.Cols, group, cos.Len(), sin.Len()))
	}
	xp := at(x)
	defer b.enter()()
	b.each(kRoPE, x.Rows*half, xp, x.Stride, x.Rows, half, devBuffer(cos).ptr, devBuffer(sin).ptr, group)
}

// Attention implements backend.Backend: per chunk of query tokens, the
// scores of every (token, head) row against the keys the chunk's last
// token sees (one product), their causal softmax in place, and the
// weighted sum of the values (a second product).
func (b *Backend) Attention(out, q, kv backend.Mat, heads int, scale float32) {
	t, dv := kv.Rows, out.Cols
	if q.Rows != t*heads || out.Rows != q.Rows || q.Cols != kv.Cols || dv > kv.Cols {
		panic(fmt.Sprintf("cuda: Attention of q %dx%d, kv %dx%d, out %dx%d, %d heads", q.Rows, q.Cols, kv.Rows, kv.Cols, out.Rows, out.Cols, heads))
	}
	if t == 0 {
		return
	}
	op, qp, kp := at(out), at(q), at(kv)
	defer b.enter()()
	chunk := max(1, min(t, attentionTokens, attentionScores/(t*heads)))
	scoreBytes := 4 * uint64(chunk*heads*t)
	s := b.devAlloc(scoreBytes)
	defer b.devFree(s, scoreBytes)
	for t0 := 0; t0 < t; t0 += chunk {
		nt := min(chunk, t-t0)
		rows, keys := nt*heads, t0+nt
		r0 := uint64(t0 * heads)
		// scores [rows, keys] = q[r0:r0+rows] · kv[:keys]ᵀ
		b.gemm(cublasOpT, cublasOpN, keys, rows, q.Cols,
			operand{ptr: kp, ld: kv.Stride}, operand{ptr: qp + 4*r0*uint64(q.Stride), ld: q.Stride}, s, keys)
		b.launch(kSoftmax, rows, threads, s, keys, keys, heads, t0*heads, scale)
		// out[r0:r0+rows] = scores · kv[:keys, :dv]
		b.gemm(cublasOpN, cublasOpN, dv, rows, keys,
			operand{ptr: kp, ld: kv.Stride}, operand{ptr: s, ld: keys}, op+4*r0*uint64(out.Stride), out.Stride)
	}
}

// SiLUMul implements backend.Backend.
func (b *Backend) SiLUMul(dst, gate, up backend.Mat) {
	sameShape("SiLUMul", dst, gate)
	sameShape("SiLUMul", dst, up)
	d, g, u := at(dst), at(gate), at(up)
	defer b.enter()()
	b.each(kSiLUMul, dst.Rows*dst.Cols, d, dst.Stride, g, gate.Stride, u, up.Stride, dst.Rows, dst.Cols)
}

// Add implements backend.Backend.
func (b *Backend) Add(dst, x, y backend.Mat) {
	sameShape("Add", dst, x)
	sameShape("Add", dst, y)
	d, xp, yp := at(dst), at(x), at(y)
	defer b.enter()()
	b.each(kAdd, dst.Rows*dst.Cols, d, dst.Stride, xp, x.Stride, yp, y.Stride, dst.Rows, dst.Cols)
}

// Copy implements backend.Backend.
func (b *Backend) Copy(dst, src backend.Mat) {
	sameShape("Copy", dst, src)
	d, s := at(dst), at(src)
	defer b.enter()()
	b.each(kCopy, dst.Rows*dst.Cols, d, dst.Stride, s, src.Stride, dst.Rows, dst.Cols)
}

// checkRows panics unless every index is a row of m: a device kernel
// reading outside a buffer would end the whole context.
func checkRows(op string, idx []int32, m backend.Mat) {
	for _, r := range idx {
		if r < 0 || int(r) >= m.Rows {
			panic(fmt.Sprintf("cuda: %s of row %d of %d", op, r, m.Rows))
		}
	}
}

// Gather implements backend.Backend.
func (b *Backend) Gather(dst, src backend.Mat, rows []int32) {
	if len(rows) > dst.Rows || dst.Cols != src.Cols {
		panic(fmt.Sprintf("cuda: Gather of %d rows of %dx%d into %dx%d", len(rows), src.Rows, src.Cols, dst.Rows, dst.Cols))
	}
	checkRows("Gather", rows, src)
	d, s := at(dst), at(src)
	defer b.enter()()
	p, n := hostBytes(rows)
	idx := b.temp(p, n)
	b.each(kGather, len(rows)*dst.Cols, d, dst.Stride, s, src.Stride, idx, len(rows), dst.Cols)
	b.devFree(idx, n)
}

// ScatterAdd implements backend.Backend.
func (b *Backend) ScatterAdd(dst, src backend.Mat, rows []int32, scale []float32) {
	if len(rows) > src.Rows || len(scale) != len(rows) || dst.Cols != src.Cols {
		panic(fmt.Sprintf("cuda: ScatterAdd of %d rows (%d scales) of %dx%d into %dx%d", len(rows), len(scale), src.Rows, src.Cols, dst.Rows, dst.Cols))
	}
	checkRows("ScatterAdd", rows, dst)
	d, s := at(dst), at(src)
	defer b.enter()()
	p, n := hostBytes(rows)
	idx := b.temp(p, n)
	p, n = hostBytes(scale)
	sc := b.temp(p, n)
	b.each(kScatterAdd, len(rows)*dst.Cols, d, dst.Stride, s, src.Stride, idx, sc, len(rows), dst.Cols)
	b.devFree(idx, n)
	b.devFree(sc, n)
}

package cuda

import (
	"fmt"

	"github.com/dsfs/dsfs/trace/backend"
)

// The methods below are trace/v4's backend.V4Ops: with them a V4 forward
// keeps its activation quantisation, indexer rotation and sparse
// attention on the device beside its products.

// ActQuant fake-quantises each row of x in place per block of block
// values, to FP8 E4M3 or (fp4) FP4 E2M1 with power-of-two scales, as
// trace/v4's actQuantFP8 and actQuantFP4.
func (b *Backend) ActQuant(x backend.Mat, block int, fp4 bool) {
	if block <= 0 || x.Cols%block != 0 {
		panic(fmt.Sprintf("cuda: ActQuant of rows of %d in blocks of %d", x.Cols, block))
	}
	p := at(x)
	defer b.enter()()
	f := 0
	if fp4 {
		f = 1
	}
	b.each(kActQuant, x.Rows*(x.Cols/block), p, x.Stride, x.Rows, x.Cols, block, f)
}

// Hadamard applies the Walsh-Hadamard transform to each row of x (a
// power-of-two width) in place and multiplies by scale.
func (b *Backend) Hadamard(x backend.Mat, scale float32) {
	if x.Cols <= 0 || x.Cols&(x.Cols-1) != 0 {
		panic(fmt.Sprintf("cuda: Hadamard of rows of %d, not a power of two", x.Cols))
	}
	p := at(x)
	defer b.enter()()
	b.launch(kHadamard, x.Rows, threads, p, x.Stride, x.Cols, scale)
}

// SparseAttention is kernel.py's sparse_attn with the per-head sink: out
// and q [T·heads, d], kv [rows, d] (K = V), sink [heads], idx [T, k] rows
// of kv (-1 = none). Rows must be contiguous (stride d).
func (b *Backend) SparseAttention(out, q, kv backend.Mat, sink backend.Buffer, idx []int32, k, heads int, scale float32) {
	d := q.Cols
	if heads <= 0 || k <= 0 || q.Rows%heads != 0 || out.Rows != q.Rows || out.Cols != d || kv.Cols != d ||
		len(idx) != q.Rows/heads*k || sink.Len() < heads || q.Stride != d || out.Stride != d || kv.Rows > 1 && kv.Stride != d {
		panic(fmt.Sprintf("cuda: SparseAttention of q %dx%d, kv %dx%d, out %dx%d, %d indices of %d, %d heads", q.Rows, q.Cols, kv.Rows, kv.Cols, out.Rows, out.Cols, len(idx), k, heads))
	}
	for _, r := range idx {
		if r < -1 || int(r) >= kv.Rows {
			panic(fmt.Sprintf("cuda: SparseAttention of row %d of %d", r, kv.Rows))
		}
	}
	o, qp, kvp, sp := at(out), at(q), at(kv), devBuffer(sink).ptr
	defer b.enter()()
	p, n := hostBytes(idx)
	ip := b.temp(p, n)
	b.launch(kSparseAttn, q.Rows, threads, o, qp, kvp, sp, ip, k, heads, d, scale)
	b.devFree(ip, n)
}

// FP4QuantE4M3 is trace/v4's backend.V41Ops: DeepSeek-V4.1's FP4
// fake-quant of the compressed KV, in place per block of block values of
// each row, E2M1 values with one E4M3 scale a block.
func (b *Backend) FP4QuantE4M3(x backend.Mat, block int) {
	if block <= 0 || x.Cols%block != 0 {
		panic(fmt.Sprintf("cuda: FP4QuantE4M3 of rows of %d in blocks of %d", x.Cols, block))
	}
	p := at(x)
	defer b.enter()()
	b.each(kFP4E4M3, x.Rows*(x.Cols/block), p, x.Stride, x.Rows, x.Cols, block)
}

package v4

import (
	"encoding/binary"
	"fmt"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/simd"
)

// linear is a decoded projection [rows, cols]: float32 values in w, or
// the checkpoint's BF16 bits in h (multiplied without widening the whole
// matrix: the head of a real model is 1 GB as BF16, 2 GB as float32).
// quant marks an FP8 or MXFP4 weight, whose input the a8 precision
// quantises to FP8 first.
type linear struct {
	w          []float32
	h          []uint16
	rows, cols int
	quant      bool
	block      int // the a8 activation block; 0 for V4's actBlock
}

// load decodes r into a linear.
func load(r *tensorRef) (*linear, error) {
	if r.t.DType == safetensors.BF16 {
		b, err := read(r.t)
		if err != nil {
			return nil, err
		}
		h := make([]uint16, len(b)/2)
		for i := range h {
			h[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return &linear{h: h, rows: r.rows, cols: r.cols}, nil
	}
	w, err := r.floats()
	if err != nil {
		return nil, err
	}
	return &linear{w: w, rows: r.rows, cols: r.cols, quant: r.quant, block: r.actBlock}, nil
}

// floats returns the weight's values as float32.
func (w *linear) floats() []float32 {
	if w.h == nil {
		return w.w
	}
	out := make([]float32, len(w.h))
	simd.WidenBF16(out, w.h)
	return out
}

// actBlock is V4's activation quantisation block along the input.
const actBlock = 128

// apply returns x·wᵀ for m rows of x [m, cols]. With a8 and a quantised
// weight, x is first quantised to FP8 per block of 128 with power-of-two
// scales, as DeepSeek's linear() does before fp8_gemm / fp4_gemm (whose
// block products are exact in float32, so a float32 product of the
// dequantised values is the same up to summation order).
func (w *linear) apply(x []float32, m int, a8 bool) ([]float32, error) {
	if len(x) != m*w.cols {
		panic(fmt.Sprintf("v4: linear of %d values for %d rows of %d", len(x), m, w.cols))
	}
	in := x
	if a8 && w.quant {
		blk := actBlock
		if w.block > 0 {
			blk = w.block
		}
		if w.cols%blk != 0 {
			return nil, fmt.Errorf("input width %d is not a multiple of the activation block %d", w.cols, blk)
		}
		in = append([]float32(nil), x...)
		actQuantFP8(in, blk)
	}
	out := make([]float32, m*w.rows)
	switch {
	case m == 0:
	case w.h != nil:
		simd.MatMulTBF16(out, w.rows, in, w.cols, w.h, w.cols, m, w.rows, w.cols)
	default:
		simd.MatMulT(out, w.rows, in, w.cols, w.w, w.cols, m, w.rows, w.cols)
	}
	return out, nil
}

package v4

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/simd"
)

// linear is a projection [rows, cols]: float32 values in w, the
// checkpoint's BF16 bits in h, or its FP8 or MXFP4 codes in c (both
// multiplied without widening the whole matrix: the head of a real model
// is 1 GB as BF16, 2 GB as float32, and decoding a layer's experts to
// float32 in memory was most of its time). quant marks an FP8 or MXFP4
// weight, whose input the a8 precision quantises to FP8 first.
type linear struct {
	w          []float32
	h          []uint16
	c          *coded
	rows, cols int
	quant      bool
	block      int // the a8 activation block; 0 for V4's actBlock
}

// load decodes r into a linear; FP8 and MXFP4 codes are read into bytes
// from a (nil: new ones).
func load(r *tensorRef, a *arena) (*linear, error) {
	if r.t.DType == safetensors.BF16 {
		b, err := read(r.t)
		if err != nil {
			return nil, err
		}
		h := make([]uint16, len(b)/2)
		for i := range h {
			h[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return &linear{h: h, rows: r.rows, cols: r.cols, block: r.actBlock}, nil
	}
	if r.t.DType == safetensors.F8E4M3 || r.t.DType == safetensors.I8 {
		b, err := readInto(r.t, a)
		if err != nil {
			return nil, err
		}
		c, err := r.coded(b, a)
		if err != nil {
			return nil, err
		}
		return &linear{c: c, rows: r.rows, cols: r.cols, quant: r.quant, block: r.actBlock}, nil
	}
	w, err := r.floats()
	if err != nil {
		return nil, err
	}
	return &linear{w: w, rows: r.rows, cols: r.cols, quant: r.quant, block: r.actBlock}, nil
}

// floats returns the weight's values as float32.
func (w *linear) floats() []float32 {
	switch {
	case w.h != nil:
		out := make([]float32, len(w.h))
		simd.WidenBF16(out, w.h)
		return out
	case w.c != nil:
		out := make([]float32, w.rows*w.cols)
		const rowsPerTask = 64
		parallelFor((w.rows+rowsPerTask-1)/rowsPerTask, func(i int) {
			lo, hi := i*rowsPerTask, min((i+1)*rowsPerTask, w.rows)
			w.c.decode(out[lo*w.cols:hi*w.cols], lo, hi)
		})
		return out
	}
	return w.w
}

// actBlock is V4's activation quantisation block along the input.
const actBlock = 128

// cancelWork is the most multiply-adds done between two looks at the
// context: about 0.1 s on one core, so that a cancelled read is answered
// promptly however long the prompt.
const cancelWork = 1 << 28

// apply returns x·wᵀ for m rows of x [m, cols], in tiles of at most about
// cancelWork multiply-adds with a look at ctx before each. With a8 and a
// quantised weight, x is first quantised to FP8 per block of 128 with
// power-of-two scales, as DeepSeek's linear() does before fp8_gemm /
// fp4_gemm (whose block products are exact in float32, so a float32
// product of the dequantised values is the same up to summation order).
func (w *linear) apply(ctx context.Context, x []float32, m int, a8 bool) ([]float32, error) {
	if len(x) != m*w.cols {
		panic(fmt.Sprintf("v4: linear of %d values for %d rows of %d", len(x), m, w.cols))
	}
	in := x
	if a8 && w.quant {
		blk := w.actBlock()
		if w.cols%blk != 0 {
			return nil, errActBlock(w.cols, blk)
		}
		in = append([]float32(nil), x...)
		simd.QuantE4M3(in, blk)
	}
	out := make([]float32, m*w.rows)
	if m == 0 || w.rows == 0 {
		return out, nil
	}
	// Tiles are whole multiples of simd's cut (12 rows, 12 columns), so
	// every value is summed as an uncut product sums it.
	const grain = 48
	n, k := w.rows, max(w.cols, 1)
	cols := n
	if grain*n*k > cancelWork {
		cols = min(n, max(grain, cancelWork/(grain*k)/grain*grain))
	}
	rows := min(m, max(grain, cancelWork/(cols*k)/grain*grain))
	for r0 := 0; r0 < m; r0 += rows {
		r := min(rows, m-r0)
		for c0 := 0; c0 < n; c0 += cols {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			nc := min(cols, n-c0)
			d, xx := out[r0*n+c0:], in[r0*w.cols:]
			switch {
			case w.c != nil:
				simd.MatMulTDecoded(d, n, xx, w.cols, r, nc, w.cols, func(dst []float32, j0, j1 int) {
					w.c.decode(dst, c0+j0, c0+j1)
				})
			case w.h != nil:
				simd.MatMulTBF16(d, n, xx, w.cols, w.h[c0*w.cols:], w.cols, r, nc, w.cols)
			default:
				simd.MatMulT(d, n, xx, w.cols, w.w[c0*w.cols:], w.cols, r, nc, w.cols)
			}
		}
	}
	return out, nil
}

// actBlock is the block along the input over which w's a8 input is
// quantised: V4's 128 unless the tensor says otherwise (V4.1: 32).
func (w *linear) actBlock() int {
	if w.block > 0 {
		return w.block
	}
	return actBlock
}

func errActBlock(cols, block int) error {
	return fmt.Errorf("input width %d is not a multiple of the activation block %d", cols, block)
}

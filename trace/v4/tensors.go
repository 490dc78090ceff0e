package v4

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/simd"
)

// tensorKind is what a tensor may be stored as.
type tensorKind int

const (
	// kindFloat is a BF16, F16 or F32 tensor of the given shape.
	kindFloat tensorKind = iota
	// kindLinear is a projection [out, in]: FP8 E4M3 with a block scale
	// (quantised: its input is quantised in a8), or a float tensor.
	kindLinear
	// kindExpert is a routed expert projection [out, in]: MXFP4 (I8
	// [out, in/2] with 1x32 E8M0 scales, quantised), or a kindLinear.
	kindExpert
	// kindIDs is tid2eid: I32 or I64.
	kindIDs
)

// tensorRef is a checked tensor and its logical shape.
type tensorRef struct {
	t          *checkpoint.Tensor
	rows, cols int // cols is 0 for a vector
	// quant is set for FP8 and MXFP4 weights: DeepSeek's linear()
	// quantises their input to FP8 (the a8 precision), per block of
	// actBlock values (0: V4's 128).
	quant    bool
	actBlock int
}

// tensorErr wraps err with the shard and tensor it concerns.
func tensorErr(t *checkpoint.Tensor, err error) error {
	return fmt.Errorf("%s: tensor %s: %w", t.Shard.Name, t.Name, err)
}

// checker resolves tensors by name and collects what is wrong with them.
type checker struct {
	cat      *checkpoint.Catalog
	problems []string
}

func (c *checker) fail(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// tensor finds name, checks it against kind and the logical shape
// [rows, cols] (a vector when cols is 0) and returns nil after recording
// a problem when it does not fit.
func (c *checker) tensor(name string, kind tensorKind, rows, cols int) *tensorRef {
	t := c.cat.Tensor(name)
	if t == nil {
		c.fail("tensor %s: missing", name)
		return nil
	}
	want := []int64{int64(rows)}
	if cols > 0 {
		want = append(want, int64(cols))
	}
	r := &tensorRef{t: t, rows: rows, cols: cols}
	bad := func(why string) *tensorRef {
		c.fail("%s: tensor %s: %s", t.Shard.Name, name, why)
		return nil
	}
	isFloat := t.DType == safetensors.BF16 || t.DType == safetensors.F16 || t.DType == safetensors.F32
	switch {
	case kind == kindIDs:
		if t.DType != safetensors.I32 && t.DType != safetensors.I64 {
			return bad(fmt.Sprintf("dtype %s, want I32 or I64", t.DType))
		}
	case kind == kindExpert && t.DType == safetensors.I8:
		if t.Format != checkpoint.FormatMXFP4 || t.Scale == nil {
			return bad("I8 without an MXFP4 scale (.scale, F8_E8M0, one per 32 values) that fits it")
		}
		want = []int64{int64(rows), int64(cols / 2)}
		r.quant = true
	case (kind == kindLinear || kind == kindExpert) && t.DType == safetensors.F8E4M3:
		if t.Format != checkpoint.FormatFP8 || t.Scale == nil {
			return bad("F8_E4M3 without a block scale (.scale) that fits it")
		}
		r.quant = true
	case isFloat:
	default:
		return bad(fmt.Sprintf("dtype %s is not one the V4 engine reads here", t.DType))
	}
	if !slices.Equal(t.Shape, want) {
		return bad(fmt.Sprintf("shape %v, want %v", t.Shape, want))
	}
	return r
}

// read reads the whole of t's data.
func read(t *checkpoint.Tensor) ([]byte, error) { return readInto(t, nil) }

// readInto reads the whole of t's data into bytes taken from a (nil: new
// ones).
func readInto(t *checkpoint.Tensor, a *arena) ([]byte, error) {
	b := a.take(int(t.Size))
	if _, err := t.ReadAt(b, 0); err != nil {
		return nil, tensorErr(t, err)
	}
	return b, nil
}

// arena hands out byte slices from one buffer that is reused once what
// was taken from it is dead: a forward reads its routed experts, 12 MB
// each on V4-Flash, one after the other, and fresh buffers cost as much
// zeroing and page faults as the read itself.
type arena struct {
	buf []byte
	off int
}

// take returns n bytes, from a's buffer when a is not nil (growing it,
// without moving what was taken since the last reset).
func (a *arena) take(n int) []byte {
	if a == nil {
		return make([]byte, n)
	}
	if a.off+n > len(a.buf) {
		a.buf, a.off = make([]byte, max(2*len(a.buf), n)), 0
	}
	b := a.buf[a.off : a.off+n : a.off+n]
	a.off += n
	return b
}

// reset makes the whole buffer available again: everything taken from it
// must be dead.
func (a *arena) reset() { a.off = 0 }

// floats decodes r to float32, [rows, cols] row-major: FP8 times its
// block scales, MXFP4 times its group scales, as the reference
// dequantises them.
func (r *tensorRef) floats() ([]float32, error) {
	t := r.t
	b, err := read(t)
	if err != nil {
		return nil, err
	}
	n := r.rows * max(r.cols, 1)
	out := make([]float32, n)
	if codecs.DecodeFloat(out, b, t.DType) {
		return out, nil
	}
	switch t.DType {
	case safetensors.F8E4M3, safetensors.I8:
		c, err := r.coded(b, nil)
		if err != nil {
			return nil, err
		}
		// Runs of rows over the cores: a routed expert is millions of
		// values.
		const rowsPerTask = 64
		parallelFor((r.rows+rowsPerTask-1)/rowsPerTask, func(i int) {
			lo, hi := i*rowsPerTask, min((i+1)*rowsPerTask, r.rows)
			c.decode(out[lo*r.cols:hi*r.cols], lo, hi)
		})
	default:
		return nil, tensorErr(t, fmt.Errorf("dtype %s does not decode to floats", t.DType))
	}
	return out, nil
}

// row decodes row i of a float tensor into dst.
func (r *tensorRef) row(dst []float32, i int) error {
	t := r.t
	size := t.DType.Bits() / 8
	b := make([]byte, len(dst)*size)
	if _, err := t.ReadAt(b, int64(i)*int64(len(b))); err != nil {
		return tensorErr(t, err)
	}
	if !codecs.DecodeFloat(dst, b, t.DType) {
		return tensorErr(t, fmt.Errorf("dtype %s has no rows to look up", t.DType))
	}
	return nil
}

// coded is an FP8 or MXFP4 weight [rows, cols] as the checkpoint stores
// it, decoded a run of rows at a time (into a matrix product's cache-sized
// blocks, so that a layer's weights are never all widened to float32).
type coded struct {
	codes []byte
	cols  int
	// FP8: E4M3 codes times fp8Scale [⌈rows/br⌉, sCols], one per block
	// of br x bc.
	fp8Scale      []float32
	br, bc, sCols int
	// MXFP4: two E2M1 codes a byte times mxScale, one E8M0 per 32 values
	// of a row.
	mxScale []byte
}

// e8m0Values maps an E8M0 scale byte to its value, as codecs decodes it
// (simd.DecodeE2M1 with it is codecs.DecodeMXFP4 bit for bit).
var e8m0Values = func() (v [256]float32) {
	for b := range v {
		v[b] = codecs.E8M0ToFloat32(byte(b))
	}
	return v
}()

// e4m3Values maps an E4M3 byte to its value, as codecs decodes it.
var e4m3Values = func() (v [256]float32) {
	for b := range v {
		v[b] = codecs.E4M3ToFloat32(byte(b))
	}
	return v
}()

// coded reads r's scales (into bytes from a) to go with its codes b (FP8
// or MXFP4 only).
func (r *tensorRef) coded(b []byte, a *arena) (*coded, error) {
	t, s := r.t, r.t.Scale
	sb, err := readInto(s, a)
	if err != nil {
		return nil, err
	}
	c := &coded{codes: b, cols: r.cols}
	if t.DType == safetensors.I8 {
		c.mxScale = sb
		return c, nil
	}
	c.br, c.bc, c.sCols = int(t.Block[0]), int(t.Block[1]), int(s.Shape[1])
	c.fp8Scale = make([]float32, len(sb)/(s.DType.Bits()/8))
	for i := range c.fp8Scale {
		switch s.DType {
		case safetensors.F8E8M0:
			c.fp8Scale[i] = codecs.E8M0ToFloat32(sb[i])
		case safetensors.F32:
			c.fp8Scale[i] = math.Float32frombits(binary.LittleEndian.Uint32(sb[4*i:]))
		default:
			return nil, tensorErr(s, fmt.Errorf("scale dtype %s is neither F8_E8M0 nor F32", s.DType))
		}
	}
	return c, nil
}

// decode writes rows j0 to j1 into dst [j1-j0, cols] as the reference
// dequantises them: FP8 times its block scale, MXFP4 times its group
// scale. It may run concurrently for disjoint rows.
func (c *coded) decode(dst []float32, j0, j1 int) {
	if c.mxScale != nil {
		per := c.cols / codecs.MXBlock // scales per row
		simd.DecodeE2M1(dst, c.codes[j0*c.cols/2:j1*c.cols/2], c.mxScale[j0*per:j1*per], &e8m0Values)
		return
	}
	for r := j0; r < j1; r++ {
		simd.DecodeScaled(dst[(r-j0)*c.cols:(r-j0+1)*c.cols], c.codes[r*c.cols:(r+1)*c.cols], &e4m3Values,
			c.fp8Scale[r/c.br*c.sCols:(r/c.br+1)*c.sCols], c.bc)
	}
}

// ids decodes an I32 or I64 tensor to ints, checking each against
// [0, limit).
func (r *tensorRef) ids(limit int) ([]int32, error) {
	b, err := read(r.t)
	if err != nil {
		return nil, err
	}
	n := r.rows * max(r.cols, 1)
	out := make([]int32, n)
	for i := range out {
		var v int64
		if r.t.DType == safetensors.I64 {
			v = int64(binary.LittleEndian.Uint64(b[8*i:]))
		} else {
			v = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
		if v < 0 || v >= int64(limit) {
			return nil, tensorErr(r.t, fmt.Errorf("entry %d is %d, outside [0, %d)", i, v, limit))
		}
		out[i] = int32(v)
	}
	return out, nil
}

// bf16Round rounds each value to the nearest bfloat16, ties to even, as
// DeepSeek's convert.py leaves wo_a.
func bf16Round(v []float32) {
	for i, x := range v {
		v[i] = codecs.BF16ToFloat32(codecs.Float32ToBF16(x))
	}
}

package v4

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
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
	// quantises their input to FP8 (the a8 precision).
	quant bool
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
func read(t *checkpoint.Tensor) ([]byte, error) {
	b := make([]byte, t.Size)
	if _, err := t.Shard.ReadAt(b, t.Offset); err != nil {
		return nil, tensorErr(t, err)
	}
	return b, nil
}

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
	switch t.DType {
	case safetensors.BF16:
		codecs.DecodeBF16(out, b)
	case safetensors.F16:
		codecs.DecodeF16(out, b)
	case safetensors.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case safetensors.F8E4M3:
		return out, decodeFP8(out, b, t, r.rows, r.cols)
	case safetensors.I8:
		s, err := read(t.Scale)
		if err != nil {
			return nil, err
		}
		// Runs of rows over the cores: a routed expert is millions of
		// values, and decoding is most of a layer's load time.
		const rowsPerTask = 64
		per := len(s) / r.rows // scales per row
		parallelFor((r.rows+rowsPerTask-1)/rowsPerTask, func(i int) {
			lo, hi := i*rowsPerTask, min((i+1)*rowsPerTask, r.rows)
			codecs.DecodeMXFP4(out[lo*r.cols:hi*r.cols], b[lo*per*16:hi*per*16], s[lo*per:hi*per])
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
	if _, err := t.Shard.ReadAt(b, t.Offset+int64(i)*int64(len(b))); err != nil {
		return tensorErr(t, err)
	}
	switch t.DType {
	case safetensors.BF16:
		codecs.DecodeBF16(dst, b)
	case safetensors.F16:
		codecs.DecodeF16(dst, b)
	case safetensors.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	default:
		return tensorErr(t, fmt.Errorf("dtype %s has no rows to look up", t.DType))
	}
	return nil
}

// decodeFP8 multiplies E4M3 values by their block scales (E8M0 or F32).
func decodeFP8(out []float32, b []byte, t *checkpoint.Tensor, rows, cols int) error {
	s := t.Scale
	sb, err := read(s)
	if err != nil {
		return err
	}
	br, bc := int(t.Block[0]), int(t.Block[1])
	sCols := int(s.Shape[1])
	scale := make([]float32, len(sb)/(s.DType.Bits()/8))
	for i := range scale {
		switch s.DType {
		case safetensors.F8E8M0:
			scale[i] = codecs.E8M0ToFloat32(sb[i])
		case safetensors.F32:
			scale[i] = math.Float32frombits(binary.LittleEndian.Uint32(sb[4*i:]))
		default:
			return tensorErr(s, fmt.Errorf("scale dtype %s is neither F8_E8M0 nor F32", s.DType))
		}
	}
	parallelFor(rows, func(r int) {
		srow := scale[r/br*sCols:]
		for c := range cols {
			out[r*cols+c] = codecs.E4M3ToFloat32(b[r*cols+c]) * srow[c/bc]
		}
	})
	return nil
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

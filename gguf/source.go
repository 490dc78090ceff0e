package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/codecs/iq2xxs"
	"github.com/dsfs/dsfs/codecs/q2k"
	"github.com/dsfs/dsfs/codecs/q8_0"
	"github.com/dsfs/dsfs/safetensors"
)

// readSource reads bytes [off, off+len(p)) of a source tensor.
func readSource(t *checkpoint.Tensor, p []byte, off int64) error {
	if _, err := t.Shard.ReadAt(p, t.Offset+off); err != nil {
		return fmt.Errorf("%s: tensor %s: %w", t.Shard.Name, t.Name, err)
	}
	return nil
}

// cols is a source tensor's row width: its last dimension (1 for a scalar).
func cols(t *checkpoint.Tensor) int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// DecodeRows returns rows [lo, hi) of a source tensor as float32 by the
// converter's rule: BF16, F16 and F32 widened exactly; FP8 E4M3 as
// w.float() * scale, one float32 multiply by the row block's scale (F32
// weight_scale_inv as DeepSeek-V3 stores it, or E8M0 2^(e-127)).
func DecodeRows(t *checkpoint.Tensor, lo, hi int64) ([]float32, error) {
	b, scale, err := readRows(t, lo, hi)
	if err != nil {
		return nil, err
	}
	c := cols(t)
	out := make([]float32, (hi-lo)*c)
	if scale == nil {
		if !codecs.DecodeFloat(out, b, t.DType) {
			return nil, noFloatDecode(t)
		}
		return out, nil
	}
	codecs.DequantFP8Rows(out, b, scale, int(lo), int(hi), int(c), int(t.Block[0]), int(t.Block[1]), int(cols(t.Scale)))
	return out, nil
}

// readRows reads the bytes of a source tensor's rows [lo, hi) and, for
// FP8, their block scales (nil for any other dtype).
func readRows(t *checkpoint.Tensor, lo, hi int64) (b []byte, scale []float32, err error) {
	rb := cols(t) * int64(t.DType.Bits()) / 8
	b = make([]byte, (hi-lo)*rb)
	if err := readSource(t, b, lo*rb); err != nil {
		return nil, nil, err
	}
	if t.DType != safetensors.F8E4M3 {
		return b, nil, nil
	}
	if t.Format != checkpoint.FormatFP8 || t.Scale == nil {
		return nil, nil, fmt.Errorf("%s: tensor %s: FP8 without a block scale", t.Shard.Name, t.Name)
	}
	if scale, err = fp8Scales(t, lo, hi); err != nil {
		return nil, nil, err
	}
	return b, scale, nil
}

func noFloatDecode(t *checkpoint.Tensor) error {
	return fmt.Errorf("%s: tensor %s: dtype %s has no float decode", t.Shard.Name, t.Name, t.DType)
}

// fp8Scales returns the block scales of an FP8 tensor's rows [lo, hi): the
// scale rows from block row lo/Block[0] on, widened to float32.
func fp8Scales(t *checkpoint.Tensor, lo, hi int64) ([]float32, error) {
	s := t.Scale
	br, sCols := t.Block[0], cols(s)
	sBytes := int64(s.DType.Bits() / 8)
	first, last := lo/br, (hi-1)/br
	sb := make([]byte, (last-first+1)*sCols*sBytes)
	if err := readSource(s, sb, first*sCols*sBytes); err != nil {
		return nil, err
	}
	scale := make([]float32, (last-first+1)*sCols)
	if !codecs.DecodeScales(scale, sb, s.DType) {
		return nil, fmt.Errorf("%s: tensor %s: scale dtype %s is neither F32 nor F8_E8M0", s.Shard.Name, s.Name, s.DType)
	}
	return scale, nil
}

// encodeRows writes rows [lo, hi) of a source tensor as typ: DecodeRows's
// values encoded by Encode, a row at a time through one row of float32, so
// a block of output costs its source bytes and one row, not four bytes a
// value. Every type Encode knows is blockwise within a row, so the bytes
// are those of Encode over all rows at once.
func encodeRows(t *checkpoint.Tensor, lo, hi int64, typ Type, dst []byte) error {
	b, scale, err := readRows(t, lo, hi)
	if err != nil {
		return err
	}
	c := cols(t)
	row := make([]float32, c)
	rb := typ.RowBytes(c)
	srb := c * int64(t.DType.Bits()) / 8
	for r := lo; r < hi; r++ {
		src := b[(r-lo)*srb : (r-lo+1)*srb]
		if scale == nil {
			if !codecs.DecodeFloat(row, src, t.DType) {
				return noFloatDecode(t)
			}
		} else {
			br := t.Block[0]
			codecs.DequantFP8Rows(row, src, scale[(r/br-lo/br)*cols(t.Scale):], int(r), int(r+1), int(c), int(br), int(t.Block[1]), int(cols(t.Scale)))
		}
		if err := Encode(dst[(r-lo)*rb:(r-lo+1)*rb], row, typ); err != nil {
			return err
		}
	}
	return nil
}

// Encode writes float32 values as typ: F32 bits, F16 and BF16 rounded to
// nearest even (BF16 as gguf-py's quants and ggml_compute_fp32_to_bf16 do,
// NaN made quiet), Q8_0 and Q2_K as ggml's reference quantisers, IQ2_XXS
// as ggml's with a unit importance vector (q2/'s recipe).
func Encode(dst []byte, src []float32, typ Type) error {
	switch typ {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], codecs.Float32ToBF16(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], codecs.Float32ToF16(v))
		}
	case Q8_0:
		q8_0.Quantize(dst, src)
	case IQ2_XXS:
		iq2xxs.Quantize(dst, src, nil) // unit importance, as q2/
	case Q2_K:
		q2k.QuantizeRef(dst, src)
	default:
		return fmt.Errorf("gguf: no float encoder for %s", typ.Name)
	}
	return nil
}

// sameBytes reports whether a source tensor's bytes are already typ's bytes
// for the same values, so the tensor can be served unchanged.
func sameBytes(t *checkpoint.Tensor, typ Type) bool {
	switch typ {
	case F32:
		return t.DType == safetensors.F32
	case BF16:
		return t.DType == safetensors.BF16
	case F16:
		return t.DType == safetensors.F16
	case I32:
		return t.DType == safetensors.I32
	}
	return false
}

// sourceBytes returns the source bytes rows [lo, hi) of a part are made
// from, when they are rows [lo, hi) of Src (and, for FP8, the rows of its
// scale that cover them): the content a cached block of them is keyed by.
func (p Part) sourceBytes(lo, hi int64) ([]byte, error) {
	s := p.Src
	rb := cols(s) * int64(s.DType.Bits()) / 8
	b := make([]byte, (hi-lo)*rb)
	if err := readSource(s, b, lo*rb); err != nil {
		return nil, err
	}
	if sc := s.Scale; sc != nil && s.Block[0] > 0 {
		srb := cols(sc) * int64(sc.DType.Bits()) / 8
		first, last := lo/s.Block[0], (hi-1)/s.Block[0]
		sb := make([]byte, (last-first+1)*srb)
		if err := readSource(sc, sb, first*srb); err != nil {
			return nil, err
		}
		b = append(b, sb...)
	}
	return b, nil
}

// costly reports whether a type's encoder is a real quantisation search,
// worth keeping in a disk cache, rather than a rounding.
func (t Type) costly() bool { return t == IQ2_XXS || t == Q2_K }

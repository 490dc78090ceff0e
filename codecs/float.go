package codecs

import (
	"encoding/binary"
	"math"

	"github.com/dsfs/dsfs/safetensors"
)

// DecodeFloat widens src, little-endian values of dtype dt, into dst when dt
// is BF16, F16 or F32, the dtypes that decode without a scale; it reports
// false, leaving dst alone, for any other dtype.
func DecodeFloat(dst []float32, src []byte, dt safetensors.DType) bool {
	switch dt {
	case safetensors.BF16:
		DecodeBF16(dst, src)
	case safetensors.F16:
		DecodeF16(dst, src)
	case safetensors.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	default:
		return false
	}
	return true
}

// DecodeScales widens FP8 block scales into dst: F32 (weight_scale_inv as
// DeepSeek-V3 stores it) or E8M0 (2^(e-127)); it reports false, leaving dst
// alone, for any other dtype.
func DecodeScales(dst []float32, src []byte, dt safetensors.DType) bool {
	switch dt {
	case safetensors.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case safetensors.F8E8M0:
		for i := range dst {
			dst[i] = E8M0ToFloat32(src[i])
		}
	default:
		return false
	}
	return true
}

// DequantFP8Rows multiplies the E4M3 values b of rows [r0, r1), cols wide,
// by their br x bc block scales, as model.py's weight_dequant does in
// float32, into out; scale holds the scale rows from block row r0/br on,
// sCols wide.
func DequantFP8Rows(out []float32, b []byte, scale []float32, r0, r1, cols, br, bc, sCols int) {
	first := r0 / br
	for r := r0; r < r1; r++ {
		srow := scale[(r/br-first)*sCols:]
		row := out[(r-r0)*cols : (r-r0+1)*cols]
		src := b[(r-r0)*cols : (r-r0+1)*cols]
		// A scale block at a time: no division per value.
		for k, c0 := 0, 0; c0 < cols; k, c0 = k+1, c0+bc {
			sc := srow[k]
			for c := c0; c < min(c0+bc, cols); c++ {
				row[c] = E4M3ToFloat32(src[c]) * sc
			}
		}
	}
}

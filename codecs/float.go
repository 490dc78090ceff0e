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

package codecs

import (
	"encoding/binary"
	"math"

	"github.com/x448/float16"
)

// e2m1Values maps an E2M1 code to its value; code 8 is negative zero.
var e2m1Values = [16]float32{
	0, 0.5, 1, 1.5, 2, 3, 4, 6,
	float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6,
}

// E2M1ToFloat32 returns the value of the E2M1 (FP4) code in the low nibble
// of code. Two codes share a byte: element 2i in the low nibble, 2i+1 in the
// high nibble.
func E2M1ToFloat32(code byte) float32 { return e2m1Values[code&15] }

// nan32 is the one NaN the decoders produce, so that equal inputs decode to
// equal bits.
var nan32 = math.Float32frombits(0x7fc00000)

// The E4M3 (fn) layout: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits,
// no infinities, NaN at 0x7F and 0xFF.
const (
	e4m3NaN = 0x7f // the magnitude bits of both NaN bytes

	// E4M3MinPow2 and E4M3MaxPow2 bound the powers of two 2^k that E4M3
	// holds exactly: 2^-9 (the smallest subnormal) to 2^8.
	E4M3MinPow2 = -9
	E4M3MaxPow2 = 8
)

// e4m3Table maps every E4M3 byte to its float32 value.
var e4m3Table = func() (t [256]float32) {
	for b := range 256 {
		if b&e4m3NaN == e4m3NaN {
			t[b] = nan32
			continue
		}
		m, q := e4m3Int(byte(b))
		v := float32(math.Ldexp(float64(m), q))
		if b&0x80 != 0 {
			v = -v // also makes 0x80 negative zero
		}
		t[b] = v
	}
	return t
}()

// e4m3Int returns the magnitude of the non-NaN E4M3 byte b as m x 2^q with
// the integer significand m in [0, 15] and q in [-9, 5]: subnormals have
// exponent field 0 and the same q as exponent field 1.
func e4m3Int(b byte) (m uint32, q int) {
	exp := int(b>>3) & 15
	m = uint32(b & 7)
	if exp == 0 {
		return m, -9
	}
	return m | 8, exp - 10
}

// E4M3ToFloat32 decodes an F8_E4M3 (fn) byte. 0x7F and 0xFF are NaN, 0x80
// is negative zero; every other value is exact in float32.
func E4M3ToFloat32(b byte) float32 { return e4m3Table[b] }

// E4M3ToFloat64 decodes an F8_E4M3 (fn) byte exactly, as E4M3ToFloat32.
func E4M3ToFloat64(b byte) float64 { return float64(e4m3Table[b]) }

// E4M3Pow2 returns the E4M3 byte of 2^k, with k clamped to
// [E4M3MinPow2, E4M3MaxPow2], the powers of two E4M3 holds exactly:
// normals (k >= -6) are (k+7)<<3, and 2^-7, 2^-8, 2^-9 are the subnormals
// 0x04, 0x02, 0x01.
func E4M3Pow2(k int) byte {
	k = min(max(k, E4M3MinPow2), E4M3MaxPow2)
	if k >= -6 {
		return byte(k+7) << 3
	}
	return 0x04 >> (-7 - k)
}

// E8M0NaN is the E8M0 byte that encodes NaN.
const E8M0NaN = 0xff

// E8M0Exponent returns the exponent b-127 of the E8M0 scale byte b (the
// scale is 2^(b-127)), and false for the NaN byte 255.
func E8M0Exponent(b byte) (exp int, ok bool) {
	return int(b) - 127, b != E8M0NaN
}

// E8M0ToFloat32 decodes an E8M0 scale byte exactly: 2^(b-127), NaN for 255.
// Byte 0 is 2^-127, a float32 subnormal.
func E8M0ToFloat32(b byte) float32 {
	switch b {
	case E8M0NaN:
		return nan32
	case 0:
		return math.Float32frombits(1 << 22) // 2^-127 = 2^22 x 2^-149
	}
	return math.Float32frombits(uint32(b) << 23)
}

// E8M0ToFloat64 decodes an E8M0 scale byte exactly: 2^(b-127), NaN for 255.
func E8M0ToFloat64(b byte) float64 {
	if b == E8M0NaN {
		return math.NaN()
	}
	return math.Ldexp(1, int(b)-127)
}

// BF16ToFloat32 widens a bfloat16 (the high half of a float32) exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 rounds f to bfloat16, to nearest with ties to even. NaN stays
// NaN (made quiet, sign kept); overflow rounds to infinity as IEEE requires.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToFloat32 widens an IEEE half-precision value exactly.
func F16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// Float32ToF16 rounds f to IEEE half precision, to nearest with ties to even.
func Float32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// DecodeBF16 widens the little-endian bfloat16 values in src into dst, which
// must hold
// len(src)/2 values.
func DecodeBF16(dst []float32, src []byte) {
	checkLen("DecodeBF16 src", len(src), 2*len(dst))
	for i := range dst {
		dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// DecodeF16 widens the little-endian half-precision values in src into dst,
// which must hold
// len(src)/2 values.
func DecodeF16(dst []float32, src []byte) {
	checkLen("DecodeF16 src", len(src), 2*len(dst))
	for i := range dst {
		dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

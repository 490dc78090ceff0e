// Package q8_0 is ggml's Q8_0 block format: 32 weights as a binary16 scale
// d and 32 int8 codes q, the value of code q being q·d. Quantize is
// quantize_row_q8_0_ref (and gguf-py's quants.Q8_0, which is bit-exact with
// it): d = max|x| / 127 in float32, codes round(x · (1/d)) with halves away
// from zero, d stored rounded to binary16 by GGML_FP32_TO_FP16.
package q8_0

import (
	"encoding/binary"
	"math"

	"github.com/dsfs/dsfs/codecs/internal/ggmlfp16"
)

// Block geometry.
const (
	BlockWeights = 32
	BlockBytes   = 2 + BlockWeights
)

// Quantize encodes src, whose length is a multiple of BlockWeights, into
// dst (len(src)/32·34 bytes).
func Quantize(dst []byte, src []float32) {
	for b := 0; b < len(src)/BlockWeights; b++ {
		x := (*[BlockWeights]float32)(src[b*BlockWeights:])
		y := (*[BlockBytes]byte)(dst[b*BlockBytes:])
		// ggml's MAX(amax, fabsf(v)), (a) > (b) ? (a) : (b), is the
		// largest |v| when no v is NaN; ordered as integers, the bits of
		// |v| order as the values do, NaNs above +Inf. Four maxima side
		// by side break the chain of dependent compares.
		var m0, m1, m2, m3 uint32
		for i := 0; i < BlockWeights; i += 4 {
			m0 = max(m0, math.Float32bits(x[i])&^(1<<31))
			m1 = max(m1, math.Float32bits(x[i+1])&^(1<<31))
			m2 = max(m2, math.Float32bits(x[i+2])&^(1<<31))
			m3 = max(m3, math.Float32bits(x[i+3])&^(1<<31))
		}
		m := max(m0, m1, m2, m3)
		amax := math.Float32frombits(m)
		nan := m > 0x7f800000
		if nan {
			amax = amaxNaN(x)
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y[:], ggmlfp16.Bits(d))
		// |v·id| <= amax·id, rounding being monotonic: below 2^23 and not
		// NaN, every code takes the branch-free rounding.
		if !nan && amax*id < 1<<23 {
			for j, v := range x {
				y[2+j] = byte(int8(roundAway(float32(v * id))))
			}
			continue
		}
		for j, v := range x {
			y[2+j] = byte(int8(roundf(v * id)))
		}
	}
}

// amaxNaN is ggml's MAX(amax, fabsf(v)) loop to the letter for a block
// with a NaN: a NaN |v| replaces amax, and a later value replaces it.
func amaxNaN(x *[BlockWeights]float32) float32 {
	var amax float32
	for _, v := range x {
		if a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31)); !(amax > a) {
			amax = a
		}
	}
	return amax
}

// roundAway is C's roundf for |f| < 2^23, as an integer: f plus ±0.5 in
// float64 is exact when f is at least 2^-29 in magnitude (24 significant
// bits from 2^-52 up fit 53), and below that the inexact sum stays under
// 1, so its truncation is roundf's result. The int conversion of roundf's
// float32 result gives the same integer.
func roundAway(f float32) int32 {
	return int32(float64(f) + math.Copysign(0.5, float64(f)))
}

// roundf is C's roundf: to nearest, halves away from zero. It works in
// float32: below 2^23 the truncation through int32 is exact and so is the
// fraction a-t, so comparing it with 0.5 decides a half as roundf does;
// from 2^23 on every float32 is an integer, and ±Inf and NaN round to
// themselves. The sign is put back last, so -0.3 rounds to -0 as in C.
func roundf(f float32) float32 {
	a := math.Float32frombits(math.Float32bits(f) &^ (1 << 31))
	if !(a < 1<<23) {
		return f
	}
	t := float32(int32(a))
	if a-t >= 0.5 {
		t++
	}
	return math.Float32frombits(math.Float32bits(t) | math.Float32bits(f)&(1<<31))
}

// Dequantize decodes blocks back to float32, as ggml's dequantize_row_q8_0.
func Dequantize(dst []float32, src []byte) {
	for b := 0; b < len(src)/BlockBytes; b++ {
		y := src[b*BlockBytes:]
		d := ggmlfp16.Float32(binary.LittleEndian.Uint16(y))
		for j := range BlockWeights {
			dst[b*BlockWeights+j] = float32(int8(y[2+j])) * d
		}
	}
}

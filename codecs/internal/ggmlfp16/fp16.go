// Package ggmlfp16 is ggml's float32 <-> binary16 conversion
// (GGML_FP32_TO_FP16, GGML_FP16_TO_FP32) as the reference build for generic
// x86-64 computes it, shared by the IQ2_XXS and Q2_K ports.
package ggmlfp16

import "math"

// Bits converts f to IEEE binary16 the way ggml's GGML_FP32_TO_FP16
// does: round to nearest even with subnormal results, overflow to ±Inf, and
// every NaN to sign|0x7E00. The last point is why this is not
// github.com/x448/float16, which keeps NaN payload bits; a NaN scale can
// arise from extreme finite inputs.
//
// The algorithm is ggml's branch-free one: scaling |f| by 2^112 and 2^-110
// lets the float32 adder round the mantissa to 10 bits for us.
func Bits(f float32) uint16 {
	const (
		scaleToInf  = 0x1.0p+112
		scaleToZero = 0x1.0p-110
	)
	w := math.Float32bits(f)
	shl1 := w + w
	sign := w & 0x80000000
	bias := max(shl1&0xFF000000, 0x71000000)
	// Both products are rounded on their own: ggml was built without FMA.
	base := float32(float32(math.Float32frombits(w&0x7FFFFFFF)*scaleToInf) * scaleToZero)
	base = math.Float32frombits((bias>>1)+0x07800000) + base
	bits := math.Float32bits(base)
	nonsign := (bits>>13)&0x7C00 + bits&0x0FFF
	if shl1 > 0xFF000000 {
		nonsign = 0x7E00
	}
	return uint16(sign>>16 | nonsign)
}

// Float32 widens binary16 bits to float32 exactly, as ggml's
// GGML_FP16_TO_FP32 does (NaN stays NaN).
func Float32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1F
	mant := uint32(h & 0x03FF)
	switch exp {
	case 0x1F:
		return math.Float32frombits(sign | 0x7F800000 | mant<<13)
	case 0:
		// Subnormal or zero: mant * 2^-24 is exact in float32.
		v := float32(mant) * 0x1.0p-24
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

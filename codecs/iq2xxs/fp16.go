package iq2xxs

import "math"

// halfBits returns the IEEE binary16 encoding of f rounded to nearest, ties
// to even, with subnormal results and overflow to infinity: the value ggml's
// GGML_FP32_TO_FP16 gives for every non-NaN input. NaN becomes sign|0x7E00,
// as in ggml.
func halfBits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 31 {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half: the significand with its implicit bit, shifted
		// down to units of 2^-24. A value below 2^-25 rounds to zero.
		shift := uint(14 - e)
		if shift > 24 {
			return sign
		}
		return sign | uint16(roundShift(mant|0x800000, shift))
	}
	// A carry out of the mantissa correctly bumps the exponent, up to
	// infinity at 0x7C00.
	return sign | uint16(roundShift(uint32(e)<<23|mant, 13))
}

// roundShift returns v >> s rounded to nearest, ties to even.
func roundShift(v uint32, s uint) uint32 {
	q := v >> s
	rem := v & (1<<s - 1)
	halfway := uint32(1) << (s - 1)
	if rem > halfway || rem == halfway && q&1 == 1 {
		q++
	}
	return q
}

// halfToFloat32 widens the binary16 h exactly.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise the mantissa into a float32 exponent.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

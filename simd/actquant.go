package simd

import "math"

// The activation quantisers of DeepSeek's V4 kernel.py (act_quant and
// fp4_act_quant with power-of-two "ue8m0" scales) and the Hadamard
// rotation of its indexer, applied in place. Rounding works on the
// float32 bits (keep 3 or 1 mantissa bits, ties to even; below the
// normal range, multiples of the format's smallest step), with no float64
// arithmetic: trace/v4's tests check them bit for bit against the
// arithmetic definitions.

// e4m3Max and e2m1Max are the largest finite magnitudes of the formats.
const (
	e4m3Max = 448
	e2m1Max = 6
)

// CeilPow2 is kernel.py's fast_round_scale: 2^ceil(log2(x)) from the
// float32 bits of x (the exponent, plus one if any mantissa bit is set).
func CeilPow2(x float32) float32 {
	b := math.Float32bits(x)
	e := int32(b>>23&0xff) - 127
	if b&(1<<23-1) != 0 {
		e++
	}
	return math.Float32frombits(uint32(e+127) << 23)
}

// roundSmall rounds a (0 <= a < 2^22/steps) to the nearest multiple of
// 1/steps, ties to even, in float32: adding and removing 2^23 rounds to
// an integer in the current (nearest-even) mode.
func roundSmall(a, steps float32) float32 {
	const big = 1 << 23
	return (a*steps + big - big) / steps
}

// RoundE4M3 rounds v (|v| <= 448) to the nearest FP8 E4M3 value, ties to
// even: 3 mantissa bits from 2^-6 up, multiples of 2^-9 below.
func RoundE4M3(v float32) float32 {
	b := math.Float32bits(v)
	sign, a := b&(1<<31), b&^(1<<31)
	if a < 0x3c800000 { // 2^-6
		return math.Float32frombits(math.Float32bits(roundSmall(math.Float32frombits(a), 512)) | sign)
	}
	a += 1<<19 - 1 + a>>20&1
	return math.Float32frombits(a&^(1<<20-1) | sign)
}

// RoundE2M1 rounds v (|v| <= 6) to the nearest FP4 E2M1 value (0, 0.5,
// 1, 1.5, 2, 3, 4, 6), ties to the even code: 1 mantissa bit from 1 up,
// multiples of 0.5 below.
func RoundE2M1(v float32) float32 {
	b := math.Float32bits(v)
	sign, a := b&(1<<31), b&^(1<<31)
	if a < 0x3f800000 { // 1
		return math.Float32frombits(math.Float32bits(roundSmall(math.Float32frombits(a), 2)) | sign)
	}
	a += 1<<21 - 1 + a>>22&1
	return math.Float32frombits(a&^(1<<22-1) | sign)
}

// QuantE4M3 fake-quantises x in place per block of block values (block
// divides len(x)): amax = max(|x|, 1e-4) over the block,
// s = 2^ceil(log2(amax / 448)), x <- e4m3(clamp(x/s, ±448))·s.
func QuantE4M3(x []float32, block int) {
	quantBlocks(x, block, e4m3Max, 1e-4, RoundE4M3)
}

// QuantE2M1 fake-quantises x in place per block of block values:
// amax = max(|x|, 6·2^-126), s = 2^ceil(log2(amax / 6)),
// x <- e2m1(clamp(x/s, ±6))·s.
func QuantE2M1(x []float32, block int) {
	quantBlocks(x, block, e2m1Max, float32(6*math.Ldexp(1, -126)), RoundE2M1)
}

func quantBlocks(x []float32, block int, fmax, floor float32, round func(float32) float32) {
	inv := float32(1 / float64(fmax))
	for b := 0; b < len(x); b += block {
		blk := x[b : b+block]
		amax := floor
		for _, v := range blk {
			amax = max(amax, math.Float32frombits(math.Float32bits(v)&^(1<<31)))
		}
		s := CeilPow2(amax * inv)
		for i, v := range blk {
			blk[i] = round(min(max(v/s, -fmax), fmax)) * s
		}
	}
}

// Hadamard applies the Walsh-Hadamard transform in Sylvester order to x
// (a power-of-two length) as float32 butterflies, stage by stage, then
// multiplies by scale: fast_hadamard_transform.hadamard_transform(x,
// scale).
func Hadamard(x []float32, scale float32) {
	n := len(x)
	for h := 1; h < n; h *= 2 {
		for i := 0; i < n; i += 2 * h {
			lo, hi := x[i:i+h], x[i+h:i+2*h]
			for j, a := range lo {
				b := hi[j]
				lo[j], hi[j] = a+b, a-b
			}
		}
	}
	for i := range x {
		x[i] *= scale
	}
}

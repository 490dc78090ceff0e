package v4

import "math"

// The reference definitions of the activation quantisers and the
// Hadamard rotation, in float64 arithmetic as written from kernel.py:
// simd's bit-level versions, which the forward runs, must match them bit
// for bit.

// ceilLog2Pow2 is kernel.py's fast_round_scale: 2^ceil(log2(x)) from the
// float32 bits of x (the exponent, plus one if any mantissa bit is set).
func ceilLog2Pow2(x float32) float32 {
	b := math.Float32bits(x)
	e := int32(b>>23&0xff) - 127
	if b&(1<<23-1) != 0 {
		e++
	}
	return math.Float32frombits(uint32(e+127) << 23)
}

// roundE4M3 rounds v (|v| <= 448) to the nearest E4M3 value, ties to even.
func roundE4M3(v float32) float32 {
	a := math.Abs(float64(v))
	// The spacing of E4M3 values near a: 2^-9 below the normal range
	// (2^-6), else 2^(exponent-3).
	q := math.Ldexp(1, -9)
	if a >= math.Ldexp(1, -6) {
		_, e := math.Frexp(a) // a = f·2^e, f in [0.5, 1)
		q = math.Ldexp(1, e-1-3)
	}
	return float32(math.Copysign(math.RoundToEven(a/q)*q, float64(v)))
}

// roundE2M1 rounds v (|v| <= 6) to the nearest E2M1 value (0, 0.5, 1,
// 1.5, 2, 3, 4, 6), ties to the even code.
func roundE2M1(v float32) float32 {
	a := math.Abs(float64(v))
	q := 0.5
	switch {
	case a >= 4:
		q = 2
	case a >= 2:
		q = 1
	}
	return float32(math.Copysign(math.RoundToEven(a/q)*q, float64(v)))
}

// actQuantFP8Ref fake-quantises x in place per block of block values (a
// multiple of len(x)): amax = max(|x|, 1e-4) over the block,
// s = 2^ceil(log2(amax / 448)), x <- e4m3(clamp(x/s, ±448))·s.
func actQuantFP8Ref(x []float32, block int) {
	inv := float32(1.0 / e4m3Max)
	for b := 0; b < len(x); b += block {
		blk := x[b : b+block]
		amax := float32(1e-4)
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := ceilLog2Pow2(amax * inv)
		for i, v := range blk {
			blk[i] = roundE4M3(min(max(v/s, -e4m3Max), e4m3Max)) * s
		}
	}
}

// actQuantFP4Ref fake-quantises x in place per block of block values:
// amax = max(|x|, 6·2^-126), s = 2^ceil(log2(amax / 6)),
// x <- e2m1(clamp(x/s, ±6))·s.
func actQuantFP4Ref(x []float32, block int) {
	inv := float32(1.0 / e2m1Max)
	floor := float32(6 * math.Ldexp(1, -126))
	for b := 0; b < len(x); b += block {
		blk := x[b : b+block]
		amax := floor
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := ceilLog2Pow2(amax * inv)
		for i, v := range blk {
			blk[i] = roundE2M1(min(max(v/s, -e2m1Max), e2m1Max)) * s
		}
	}
}

// hadamardRef applies the Walsh-Hadamard transform in Sylvester order to x
// (a power-of-two length) as float32 butterflies, then multiplies by
// scale: fast_hadamard_transform.hadamard_transform(x, scale).
func hadamardRef(x []float32, scale float32) {
	n := len(x)
	for h := 1; h < n; h *= 2 {
		for i := 0; i < n; i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := x[j], x[j+h]
				x[j], x[j+h] = a+b, a-b
			}
		}
	}
	for i := range x {
		x[i] *= scale
	}
}

package ggmlfp16

import (
	"math"
	"testing"
)

// halfValue is an independent decoding of a finite binary16: sign, biased
// exponent and mantissa evaluated in float64.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	if exp == 0 {
		return sign * math.Ldexp(mant, -24)
	}
	return sign * math.Ldexp(1024+mant, exp-25)
}

func TestHalfToFloat32(t *testing.T) {
	for h := range 1 << 16 {
		got := Float32(uint16(h))
		exp := h >> 10 & 0x1f
		switch {
		case exp == 0x1f && h&0x3ff == 0:
			if !math.IsInf(float64(got), 1-2*(h>>15)) {
				t.Fatalf("Float32(%#04x) = %g, want infinity", h, got)
			}
		case exp == 0x1f:
			if got == got {
				t.Fatalf("Float32(%#04x) = %g, want NaN", h, got)
			}
		default:
			want := float32(halfValue(uint16(h)))
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("Float32(%#04x) = %g, want %g", h, got, want)
			}
		}
	}
}

// TestHalfBits checks round to nearest even on every finite binary16, the
// midpoints between neighbours and the float32 values either side of them.
func TestHalfBits(t *testing.T) {
	check := func(f float32, want uint16) {
		t.Helper()
		if got := Bits(f); got != want {
			t.Fatalf("Bits(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
		if got := Bits(-f); got != want|0x8000 {
			t.Fatalf("Bits(%g) = %#04x, want %#04x", -f, got, want|0x8000)
		}
	}
	const maxFinite = 0x7bff
	for h := uint16(0); h <= maxFinite; h++ {
		v := halfValue(h)
		check(float32(v), h)
		next := halfValue(h + 1) // 0x7c00 continues the binade sequence to 2^16
		mid := float32((v + next) / 2)
		even := h
		if h&1 == 1 {
			even = h + 1
		}
		check(mid, even)
		check(math.Nextafter32(mid, 0), h)
		check(math.Nextafter32(mid, math.MaxFloat32), h+1)
	}
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{0, 0},
		{float32(math.Inf(1)), 0x7c00},
		{math.MaxFloat32, 0x7c00},
		{65520, 0x7c00},
		{math.Nextafter32(65520, 0), 0x7bff},
		{math.SmallestNonzeroFloat32, 0},
		{float32(math.Ldexp(1, -25)), 0},
		{math.Nextafter32(float32(math.Ldexp(1, -25)), 1), 1},
	} {
		check(c.f, c.want)
	}
	if got := Bits(float32(math.NaN())); got&0x7fff != 0x7e00 {
		t.Fatalf("Bits(NaN) = %#04x, want a quiet NaN 0x7e00", got)
	}
}

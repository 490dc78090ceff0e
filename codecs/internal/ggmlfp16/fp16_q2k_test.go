package ggmlfp16

import (
	"math"
	"testing"

	"github.com/x448/float16"
)

func TestFP16Bits(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3C00},
		{-2, 0xC000},
		{65504, 0x7BFF},                            // largest finite half
		{65519.996, 0x7BFF},                        // just below the rounding boundary
		{65520, 0x7C00},                            // rounds to +Inf
		{-1e6, 0xFC00},                             // overflow keeps the sign
		{float32(math.Inf(1)), 0x7C00},             //
		{0x1p-24, 0x0001},                          // smallest subnormal half
		{0x1p-25, 0x0000},                          // tie to even: 0
		{0x1.8p-25, 0x0001},                        // above the tie
		{0x3p-25, 0x0002},                          // tie 1.5 ulp to even: 2
		{1 + 0x1p-11, 0x3C00},                      // tie to even at 1
		{1 + 0x3p-11, 0x3C02},                      // tie to even upwards
		{float32(math.NaN()), 0x7E00},              // canonical quiet NaN
		{math.Float32frombits(0xFFC00001), 0xFE00}, // payload dropped, sign kept
	} {
		if got := Bits(tc.f); got != tc.want {
			t.Errorf("Bits(%g = %#08x) = %#04x, want %#04x", tc.f, math.Float32bits(tc.f), got, tc.want)
		}
	}
}

// TestFP16BitsMatchesX448 compares with github.com/x448/float16, an
// independent round-to-nearest-even conversion, on every float32 next to a
// half-precision rounding boundary and on a stride through all the others.
// (A one-off run over all 2^32 inputs found no difference except NaN,
// where x448 keeps payload bits and ggml does not.)
func TestFP16BitsMatchesX448(t *testing.T) {
	check := func(u uint32) {
		f := math.Float32frombits(u)
		if f != f {
			return
		}
		if got, want := Bits(f), float16.Fromfloat32(f).Bits(); got != want {
			t.Fatalf("Bits(%g = %#08x) = %#04x, x448 gives %#04x", f, u, got, want)
		}
	}
	for h := range uint32(0x7C00) {
		// Midpoint between half h and h+1, widened to float32 (exact).
		lo := float64(float16.Frombits(uint16(h)).Float32())
		hi := float64(float16.Frombits(uint16(h + 1)).Float32())
		mid := math.Float32bits(float32((lo + hi) / 2))
		for _, u := range []uint32{mid - 1, mid, mid + 1} {
			check(u)
			check(u | 1<<31)
		}
	}
	for u := uint64(0); u < 1<<32; u += 4093 {
		check(uint32(u))
	}
}

func TestFloat32MatchesX448(t *testing.T) {
	for h := range 1 << 16 {
		got := Float32(uint16(h))
		want := float16.Frombits(uint16(h)).Float32()
		if got != got || want != want {
			if got == got || want == want {
				t.Fatalf("Float32(%#04x) = %g, want %g", h, got, want)
			}
			continue
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Float32(%#04x) = %g (%#08x), want %g (%#08x)", h, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

package simd

import "golang.org/x/sys/cpu"

// pow2Scales32 is Pow2ScalesE4M3 over 32 x n32 bytes, with the window's
// bytes [lo, hi] and its offset as two saturating steps: a byte less sub
// plus add, held to [0, 17], indexes e4m3Pow2. It returns the count of
// clamped bytes.
//
//go:noescape
func pow2Scales32(dst, s *byte, add, sub, lo, hi byte, n32 int) (clamped int)

// pow2ScalesVector runs pow2Scales32 over the whole groups of 32 bytes
// and returns how many bytes it did and how many of them it clamped.
func pow2ScalesVector(dst, s []byte, base int) (done, clamped int) {
	n32 := len(s) / 32
	if !vectorSteps || !cpu.X86.HasPOPCNT || n32 == 0 {
		return 0, 0
	}
	// base lies in [-8, 245] for a g of [-126, 127]. A window wholly
	// below byte 0 or above byte 255 has no [lo, hi] to test against and
	// is left to the Go loop.
	if base < -(Pow2Window-1) || base > 255 {
		return 0, 0
	}
	add, sub := byte(max(-base, 0)), byte(max(base, 0))
	lo, hi := byte(max(base, 0)), byte(min(max(base+Pow2Window-1, 0), 255))
	return 32 * n32, pow2Scales32(&dst[0], &s[0], add, sub, lo, hi, n32)
}

package simd

// Steps maps a sign-magnitude byte b to a 4-bit code: the number of its
// seven thresholds that the magnitude b&0x7F exceeds, plus 8 when b is
// negative with a nonzero magnitude. A code table that is non-decreasing
// in the magnitude and mirrors it that way in the sign is a Steps; the
// E2M1 codes of scaled E4M3 values are one. The vector kernel compares a
// whole block with each threshold, so each is kept broadcast to a block.
type Steps struct {
	rows [7][Block]byte
}

// NewSteps returns the Steps with thresholds above, each at most 0x7F (a
// threshold of 0x7F is never exceeded).
func NewSteps(above [7]byte) Steps {
	var s Steps
	for k, t := range above {
		if t > 0x7f {
			panic("simd: NewSteps: threshold above 0x7F")
		}
		for j := range s.rows[k] {
			s.rows[k][j] = t
		}
	}
	return s
}

// Code returns the code of b.
func (s *Steps) Code(b byte) byte {
	m := b & 0x7f
	var c byte
	for k := range s.rows {
		if m > s.rows[k][0] {
			c++
		}
	}
	if b&0x80 != 0 && m != 0 {
		c |= 8
	}
	return c
}

// VectorBlocks reports whether MaxLow7s and PackSteps run vector kernels
// here; without them, a loop over blocks calling MaxLow7 and PackNibbles
// with a code table is faster.
func VectorBlocks() bool { return vectorSteps }

// MaxLow7s sets dst[i] to MaxLow7 of block i of src, which holds
// len(dst) blocks.
func MaxLow7s(dst, src []byte) {
	if len(src) != Block*len(dst) {
		panic("simd: MaxLow7s: len(src) is not 32 x len(dst)")
	}
	done := maxLow7sVector(dst, src)
	maxLow7sGeneric(dst[done:], src[Block*done:])
}

// PackSteps codes block i of src with steps[sel[i]] and packs its codes as
// PackNibbles does into the 16 bytes of dst from 16i; src holds len(sel)
// blocks.
func PackSteps(dst, src []byte, steps []Steps, sel []byte) {
	n := len(sel)
	if len(src) != Block*n || len(dst) != Block/2*n {
		panic("simd: PackSteps: len(src) is not 32 x len(sel) or len(dst) 16 x len(sel)")
	}
	for _, k := range sel {
		if int(k) >= len(steps) {
			panic("simd: PackSteps: selector out of range")
		}
	}
	done := packStepsVector(dst, src, steps, sel)
	packStepsGeneric(dst[Block/2*done:], src[Block*done:], steps, sel[done:])
}

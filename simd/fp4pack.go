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

// VectorBlocks reports whether MaxLow7s, PackSteps and RescaleE8M0 run
// vector kernels here; without them, a loop over blocks calling MaxLow7
// and PackNibbles with a code table is faster.
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
	// The kernel stops before a selector out of range; the portable loop
	// takes over there and panics.
	done := packStepsVector(dst, src, steps, sel)
	packStepsGeneric(dst[Block/2*done:], src[Block*done:], steps, sel[done:])
}

// Shifts is a signed shift per magnitude byte 0..0x7F: for a block whose
// largest magnitude byte (MaxLow7) is m, how far its E8M0 scale must move
// so that the block fits a narrower element format. It is kept as the
// vector kernel looks it up: eight 16-entry tables, by the high three bits
// of m, each repeated in both lanes of a register.
type Shifts struct {
	tables [8][Block]byte
}

// NewShifts returns the Shifts with shift c[m] for magnitude byte m, each
// in [-127, 127].
func NewShifts(c [128]int8) Shifts {
	var s Shifts
	for m, v := range c {
		if v == -128 {
			panic("simd: NewShifts: shift -128")
		}
		s.tables[m>>4][m&15] = byte(v)
		s.tables[m>>4][16+m&15] = byte(v)
	}
	return s
}

// Shift returns the shift of magnitude byte m&0x7F.
func (s *Shifts) Shift(m byte) int8 { return int8(s.tables[m>>4&7][m&15]) }

// RescaleE8M0 moves the E8M0 scale byte s[i] of each block i by the shift
// of its largest magnitude byte top[i] (taken as top[i]&0x7F, so MaxLow7's
// result) and writes the new scale byte to t[i]:
//
//   - 255 (NaN) where the block holds a NaN (top is 0x7F) or s[i] is 255;
//   - 1 where the block is zeros (top is 0);
//   - s[i] + shifts(top[i]), kept within [1, 254], otherwise.
//
// sel[i] is s[i] - t[i] + bias (mod 256) in the last case and 0 in the
// first two: the index, among tables kept per shift, of the code table a
// block is packed with (PackSteps), where NaN and zero blocks pack to
// codes 0 under any table. All four slices have the same length.
func RescaleE8M0(t, sel, top, s []byte, shifts *Shifts, bias byte) {
	n := len(top)
	if len(t) != n || len(sel) != n || len(s) != n {
		panic("simd: RescaleE8M0: slices of different lengths")
	}
	done := rescaleE8M0Vector(t, sel, top, s, shifts, bias)
	rescaleE8M0Generic(t[done:], sel[done:], top[done:], s[done:], shifts, bias)
}

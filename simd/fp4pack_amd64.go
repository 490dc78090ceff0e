package simd

import "golang.org/x/sys/cpu"

// vectorSteps selects the AVX2 kernels of MaxLow7s, PackSteps,
// RescaleE8M0 and Pow2ScalesE4M3; tests clear it to run the portable
// loops.
var vectorSteps = cpu.X86.HasAVX2

// maxLow7s8 writes the MaxLow7 of 8 x n8 blocks from src to dst.
//
//go:noescape
func maxLow7s8(dst, src *byte, n8 int)

// packSteps2 codes and packs 2 x n2 blocks from src to dst, block i with
// the Steps at steps + 224 x sel[i], up to the first pair with a selector
// of nsteps or more, and returns how many pairs it did.
//
//go:noescape
func packSteps2(dst, src *byte, steps *Steps, nsteps int, sel *byte, n2 int) (done int)

// maxLow7sVector runs maxLow7s8 over the whole groups of 8 blocks and
// returns how many blocks it did.
func maxLow7sVector(dst, src []byte) int {
	n8 := len(dst) / 8
	if !vectorSteps || n8 == 0 {
		return 0
	}
	maxLow7s8(&dst[0], &src[0], n8)
	return 8 * n8
}

// packStepsVector runs packSteps2 over the whole pairs of blocks, up to
// the first pair with a selector out of range, and returns how many blocks
// it did.
func packStepsVector(dst, src []byte, steps []Steps, sel []byte) int {
	n2 := len(sel) / 2
	if !vectorSteps || n2 == 0 || len(steps) == 0 {
		return 0
	}
	return 2 * packSteps2(&dst[0], &src[0], &steps[0], len(steps), &sel[0], n2)
}

// rescaleE8M0x32 is RescaleE8M0 over 32 x n32 blocks.
//
//go:noescape
func rescaleE8M0x32(t, sel, top, s *byte, shifts *Shifts, bias byte, n32 int)

// rescaleE8M0Vector runs rescaleE8M0x32 over the whole groups of 32
// blocks and returns how many blocks it did.
func rescaleE8M0Vector(t, sel, top, s []byte, shifts *Shifts, bias byte) int {
	n32 := len(top) / 32
	if !vectorSteps || n32 == 0 {
		return 0
	}
	rescaleE8M0x32(&t[0], &sel[0], &top[0], &s[0], shifts, bias, n32)
	return 32 * n32
}

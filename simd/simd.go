// Package simd holds the inner loops of dsfs: the codecs' kernels over one
// 32-byte block, small enough to cost the caller's block loop at most a call
// (PackNibbles inlines), and the matrix products and reductions of the
// trace view's CPU backend (MatMulT, MatMulTBF16, Dot, WidenBF16).
//
// The one-block kernels are portable Go. Their many-block forms MaxLow7s and
// PackSteps (codes that step with the magnitude, as E2M1 codes of scaled
// E4M3 values do), with RescaleE8M0 (the new scales of many blocks and the
// code table each packs with) between them, have AVX2 assembly on amd64,
// chosen at run time (VectorBlocks says whether it runs): with them the
// Engram FP8 -> FP4 codec runs at about 11 GB/s of input per core on an AMD
// EPYC, 1.7 GB/s without (go test -bench EngramFP4 ./codecs). So does
// Pow2ScalesE4M3, NVFP4's weight_scale bytes from MXFP4's E8M0 scales (20
// GB/s of scales, 2.5 as a table lookup in Go). The matrix
// kernels have AVX2 + FMA assembly on amd64, chosen at run time from
// golang.org/x/sys/cpu, with portable Go beside it as the fallback (Kernel
// says which runs); BenchmarkMatMulT measures them against PeakGFLOPS, the
// machine's register-only FMA rate.
//
// The counting kernels of the inventory's value checks (NibbleHist,
// E4M3Tally, ExceedsE4M3) have AVX2 assembly, and AVX-512BW for the FP4
// code histogram, chosen the same way, so that the checks cost a fraction
// of SHA-256 with SHA-NI (go test -bench HashVsSha256sum ./inventory). So
// does E8M0Tally, from which NVFP4's global exponent of a group of MXFP4
// scales is had in one pass at 50 GB/s, where a histogram of them runs at
// 3 (go test -bench GlobalExponent ./codecs).
//
// # Kernels per architecture
//
// Every kernel follows one layout, as hash/crc32 does:
//
//   - X.go: the exported function. It checks its arguments, lets the
//     architecture's kernel do what it can (xVector, which returns how many
//     blocks or rows it did) and finishes with the portable loop.
//   - X_generic.go: the portable loop, xGeneric, built everywhere. It is
//     the reference: it states the arithmetic in plain Go, and it is what
//     runs on other architectures, on CPUs without the instructions and on
//     the tail the kernel leaves.
//   - X_amd64.go and X_amd64.s: the assembly and the switch that selects
//     it from golang.org/x/sys/cpu (useFMA, vectorSteps, vectorE2M1,
//     useAVX2, useAVX512), a variable so that tests can clear it.
//   - X_other.go (!amd64): the same switch, false, and xVector doing
//     nothing.
//
// What an amd64 kernel must match in its generic twin: for the codec and
// counting kernels (MaxLow7s, PackSteps, RescaleE8M0, Pow2ScalesE4M3,
// DecodeE2M1, Axpy, E4M3Tally, E8M0Tally, NibbleHist, ExceedsE4M3), every
// output bit on every input, so the assembly rounds where the Go rounds and
// uses no fused multiply-add the Go does not have; the view's bytes are
// then the same on every machine. For the matrix kernels (MatMulT,
// MatMulTBF16, Dot, WidenBF16), the same values up to float32
// reassociation: the eight-lane sums of dotGeneric, within
// 1e-7·(k+2)·Σ|x·w| of the exact product. The tests of each kernel run
// random inputs, with their seed printed on failure, through both paths by
// clearing the switch, over lengths that leave the kernel a tail, and
// compare as above; a new kernel comes with such a test.
package simd

import "encoding/binary"

// Block is the block the kernels work on: 32 one-byte elements, the MXFP4
// and Engram block.
const Block = 32

// MaxLow7 returns the largest low-7-bit value b&0x7F of a block: for E4M3
// bytes, the largest magnitude. It compares eight bytes at a time in 64-bit
// words.
func MaxLow7(b *[Block]byte) byte {
	const low7 = 0x7f7f7f7f7f7f7f7f
	x := max8(
		max8(binary.LittleEndian.Uint64(b[0:])&low7, binary.LittleEndian.Uint64(b[8:])&low7),
		max8(binary.LittleEndian.Uint64(b[16:])&low7, binary.LittleEndian.Uint64(b[24:])&low7))
	x = max8(x, x>>32)
	x = max8(x, x>>16)
	x = max8(x, x>>8)
	return byte(x)
}

// max8 returns the bytewise maximum of a and b, whose bytes are all < 0x80.
func max8(a, b uint64) uint64 {
	const high = 0x8080808080808080
	ge := ((a | high) - b) & high // per byte: a >= b; no borrow crosses a byte
	mask := ge - ge>>7 | ge       // 0xFF where a >= b
	return b ^ (a^b)&mask
}

// PackNibbles maps each byte of a block through lut, whose entries are
// 4-bit codes, and packs the codes two to a byte: element 2i in the low
// nibble of dst[i], 2i+1 in the high nibble.
func PackNibbles(dst *[Block / 2]byte, src *[Block]byte, lut *[256]byte) {
	for i := range dst {
		dst[i] = lut[src[2*i]] | lut[src[2*i+1]]<<4
	}
}

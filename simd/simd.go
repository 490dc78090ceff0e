// Package simd holds the inner loops of dsfs: the codecs' kernels over one
// 32-byte block, small enough to cost the caller's block loop at most a call
// (PackNibbles inlines), and the matrix products and reductions of the
// trace view's CPU backend (MatMulT, MatMulTBF16, Dot, WidenBF16).
//
// The one-block kernels are portable Go. Their many-block forms MaxLow7s
// and PackSteps (codes that step with the magnitude, as E2M1 codes of
// scaled E4M3 values do) have AVX2 assembly on amd64, chosen at run time
// (VectorBlocks says whether it runs): with them the Engram FP8 -> FP4
// codec runs at about 9 GB/s of input per core on an AMD EPYC, 1.7 GB/s
// without (go test -bench EngramFP4 ./codecs). The matrix kernels have
// AVX2 + FMA assembly on amd64, chosen at run time from
// golang.org/x/sys/cpu, with portable Go beside it as the fallback (Kernel
// says which runs); BenchmarkMatMulT measures them against PeakGFLOPS, the
// machine's register-only FMA rate.
//
// The counting kernels of the inventory's value checks (NibbleHist,
// E4M3Tally, ExceedsE4M3) have AVX2 assembly, and AVX-512BW for the FP4
// code histogram, chosen the same way, so that the checks cost a fraction
// of SHA-256 with SHA-NI (go test -bench HashVsSha256sum ./inventory).
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

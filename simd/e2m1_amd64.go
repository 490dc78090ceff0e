package simd

import "golang.org/x/sys/cpu"

// vectorE2M1 selects the AVX2 kernel of DecodeE2M1; tests clear it to
// run the portable loop.
var vectorE2M1 = cpu.X86.HasAVX2

// decodeE2M1AVX2 decodes n blocks: each block's 32 nibbles are widened
// to lanes, looked up in the magnitudes with VPERMPS, given bit 3 as
// their sign and multiplied by the block's scale.
//
//go:noescape
func decodeE2M1AVX2(dst *float32, codes, scales *byte, scaleOf *[256]float32, magnitudes *[8]float32, n int)

func decodeE2M1Vector(dst []float32, codes, scales []byte, scaleOf *[256]float32) int {
	if !vectorE2M1 || len(scales) == 0 {
		return 0
	}
	decodeE2M1AVX2(&dst[0], &codes[0], &scales[0], scaleOf, &e2m1Magnitudes, len(scales))
	return len(scales)
}

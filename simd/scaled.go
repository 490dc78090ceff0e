package simd

import "fmt"

// DecodeScaled sets dst[i] = values[codes[i]] × scales[i/block]: a row of
// an 8-bit format (FP8 E4M3, through its 256 values) with one scale per
// block of columns. The scale is looked up once a block and each product
// rounded once, as a per-element loop rounds it. There is no vector
// kernel (it would be AVX2 gathers from the table; not tried).
func DecodeScaled(dst []float32, codes []byte, values *[256]float32, scales []float32, block int) {
	if block <= 0 || len(dst) != len(codes) || len(scales) < (len(codes)+block-1)/block {
		panic(fmt.Sprintf("simd: DecodeScaled of %d codes into %d values with %d scales per %d", len(codes), len(dst), len(scales), block))
	}
	for b := 0; b < len(codes); b += block {
		s := scales[b/block]
		in := codes[b:min(b+block, len(codes))]
		out := dst[b : b+len(in)]
		for i, c := range in {
			out[i] = values[c] * s
		}
	}
}

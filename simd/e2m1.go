package simd

import "fmt"

// E2M1Block is the number of E2M1 values sharing one scale in
// DecodeE2M1: an MXFP4 group.
const E2M1Block = 32

// e2m1Magnitudes are the E2M1 codes' magnitudes (bits 0-2); bit 3 is
// the sign.
var e2m1Magnitudes = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// DecodeE2M1 decodes blocks of 32 E2M1 codes, two a byte (low nibble
// first), each block times its scale: dst[32i+j] = E2M1(code j of block
// i) × scaleOf[scales[i]]. codes holds 16 bytes a block and dst 32
// values. It is MXFP4's decode when scaleOf maps E8M0 bytes to 2^(b−127)
// (and 255 to NaN); code 8 is negative zero.
func DecodeE2M1(dst []float32, codes, scales []byte, scaleOf *[256]float32) {
	if len(codes) != E2M1Block/2*len(scales) || len(dst) != E2M1Block*len(scales) {
		panic(fmt.Sprintf("simd: DecodeE2M1 of %d code bytes and %d scales into %d values", len(codes), len(scales), len(dst)))
	}
	done := decodeE2M1Vector(dst, codes, scales, scaleOf)
	decodeE2M1Generic(dst[E2M1Block*done:], codes[E2M1Block/2*done:], scales[done:], scaleOf)
}

// e2m1 is an E2M1 code's value.
func e2m1(c byte) float32 {
	v := e2m1Magnitudes[c&7]
	if c&8 != 0 {
		v = -v
	}
	return v
}

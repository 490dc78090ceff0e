//go:build !amd64

package simd

// vectorE2M1 is false: this architecture has no DecodeE2M1 kernel. It is a
// variable, as on amd64, for the tests that clear it.
var vectorE2M1 = false

// decodeE2M1Vector decodes nothing: this architecture has no vector kernel.
func decodeE2M1Vector(dst []float32, codes, scales []byte, scaleOf *[256]float32) int { return 0 }

package simd

// axpy8 adds a·x to y over 8 x n8 values: VMULPS then VADDPS.
//
//go:noescape
func axpy8(y, x *float32, a float32, n8 int)

func axpyVector(y []float32, a float32, x []float32) int {
	n8 := len(x) / 8
	if !useFMA || n8 == 0 {
		return 0
	}
	axpy8(&y[0], &x[0], a, n8)
	return 8 * n8
}

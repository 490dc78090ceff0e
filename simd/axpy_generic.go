// Portable Axpy loop: the reference every architecture's kernel must match
// (see "Kernels per architecture" in simd.go), and what runs where there
// is none.

package simd

// axpyGeneric adds a·x[i] to y[i], rounding the product before the sum.
func axpyGeneric(y []float32, a float32, x []float32) {
	for i, v := range x {
		y[i] += float32(a * v) // the conversion forbids a fused multiply-add
	}
}

//go:build !amd64

package simd

// useFMA is false: this architecture has no vector kernels (yet).
var useFMA = false

// Kernel names the matrix kernel in use.
func Kernel() string { return "generic" }

func matMulT(dst []float32, ldd int, x []float32, ldx int, w []float32, ldw int, m, n, k int) {
	matMulTGeneric(dst, ldd, x, ldx, w, ldw, m, n, k)
}

func matMulTBF16(dst []float32, ldd int, x []float32, ldx int, w []uint16, ldw int, m, n, k int) {
	matMulTGeneric(dst, ldd, x, ldx, w, ldw, m, n, k)
}

func dot(a, b []float32) float32 { return dotGeneric(a, b) }

func widen(dst []float32, src []uint16) { widenGeneric(dst, src) }

func peakIterations(n int) float64 { return peakGeneric(n) }

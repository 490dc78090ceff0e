package simd

import "fmt"

// Axpy adds a·x[i] to y[i] for every i, each product and sum rounded to
// float32 in turn (no fused multiply-add), so that a loop of Axpy calls
// sums every element in the order and with the roundings of the plain
// loop y[i] += a*x[i]: sparse attention's weighted sum of values.
func Axpy(y []float32, a float32, x []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("simd: Axpy of %d values into %d", len(x), len(y)))
	}
	done := axpyVector(y, a, x)
	axpyGeneric(y[done:], a, x[done:])
}

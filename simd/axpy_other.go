//go:build !amd64

package simd

// axpyVector adds nothing: this architecture has no vector kernel.
func axpyVector(y []float32, a float32, x []float32) int { return 0 }

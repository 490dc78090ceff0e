package simd

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAxpyMatchesLoop accumulates random vectors (lengths below, at and
// past the vector width) with Axpy, with the vector kernel and the
// portable loop, against y[i] += a*x[i]: identical bit for bit.
func TestAxpyMatchesLoop(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	saved := useFMA
	defer func() { useFMA = saved }()
	for i := range 200 {
		useFMA = saved && i%2 == 0
		n := rng.IntN(100)
		x, got := make([]float32, n), make([]float32, n)
		for j := range x {
			x[j], got[j] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		want := append([]float32(nil), got...)
		for range 5 {
			a := float32(rng.NormFloat64())
			Axpy(got, a, x)
			for j, v := range x {
				want[j] += float32(a * v)
			}
		}
		for j := range want {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("seed %d (vector kernel %v): element %d of %d is %g, want %g", seed, useFMA, j, n, got[j], want[j])
			}
		}
	}
}

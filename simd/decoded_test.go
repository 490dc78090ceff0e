package simd

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestMatMulTDecodedMatchesMatMulT multiplies random matrices of random
// shapes (k below, at and past the vector width, n past several decode
// blocks) through MatMulTDecoded and through MatMulT on the whole
// decoded weight, with the vector kernel and the portable one: the
// results are identical bit for bit.
func TestMatMulTDecodedMatchesMatMulT(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	saved := useFMA
	defer func() { useFMA = saved }()
	for i := range 40 {
		useFMA = saved && i%2 == 0 // the vector kernel and the portable one
		m, n, k := rng.IntN(40), 1+rng.IntN(300), 1+rng.IntN(700)
		if rng.IntN(4) == 0 {
			n, k = 1+rng.IntN(2000), 4096 // several blocks of rows
		}
		x := make([]float32, m*k)
		w := make([]float32, n*k)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		want := make([]float32, m*n)
		MatMulT(want, n, x, k, w, k, m, n, k)
		got := make([]float32, m*n)
		for i := range got {
			got[i] = float32(rng.NormFloat64()) // overwritten, never read
		}
		MatMulTDecoded(got, n, x, k, m, n, k, func(dst []float32, j0, j1 int) {
			if len(dst) != (j1-j0)*k {
				t.Errorf("seed %d: decode of rows %d-%d into %d values", seed, j0, j1, len(dst))
			}
			copy(dst, w[j0*k:j1*k])
		})
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: %dx%d·(%dx%d)ᵀ (vector kernel %v) differs from MatMulT", seed, m, k, n, k, useFMA)
		}
	}
}

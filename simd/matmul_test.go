package simd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// refMatMulT is the product in float64, with the sum of magnitudes that
// bounds its rounding error.
func refMatMulT(x []float32, ldx int, w []float32, ldw int, m, n, k int) (val, mag []float64) {
	val = make([]float64, m*n)
	mag = make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, a float64
			for p := range k {
				v := float64(x[i*ldx+p]) * float64(w[j*ldw+p])
				s += v
				a += math.Abs(v)
			}
			val[i*n+j], mag[i*n+j] = s, a
		}
	}
	return val, mag
}

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// withKernel runs fn with the vector kernels on or off.
func withKernel(t *testing.T, vector bool, fn func()) {
	t.Helper()
	saved := useFMA
	if vector && !saved {
		t.Skip("no vector kernel on this machine")
	}
	useFMA = vector && saved
	defer func() { useFMA = saved }()
	fn()
}

func TestMatMulT(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	shapes := [][3]int{{1, 1, 1}, {1, 4, 8}, {3, 4, 8}, {2, 5, 7}, {7, 9, 17}, {12, 64, 513}, {4, 3, 1030},
		{97, 13, 40}, {5, 130, 64}, {1, 1, 0}, {3, 4, 0}, {200, 7, 24}}
	for range 20 {
		shapes = append(shapes, [3]int{1 + rng.IntN(40), 1 + rng.IntN(40), rng.IntN(1200)})
	}
	for _, vector := range []bool{false, true} {
		t.Run(fmt.Sprintf("vector=%v", vector), func(t *testing.T) {
			withKernel(t, vector, func() {
				for _, s := range shapes {
					m, n, k := s[0], s[1], s[2]
					ldx, ldw, ldd := k+rng.IntN(3), k+rng.IntN(3), n+rng.IntN(3)
					x := randSlice(rng, max(0, (m-1)*ldx+k))
					w := randSlice(rng, max(0, (n-1)*ldw+k))
					dst := randSlice(rng, (m-1)*ldd+n) // garbage: must be overwritten
					MatMulT(dst, ldd, x, ldx, w, ldw, m, n, k)
					want, mag := refMatMulT(x, ldx, w, ldw, m, n, k)
					for i := range m {
						for j := range n {
							got := float64(dst[i*ldd+j])
							// float32 summation error is bounded by about k·ε·Σ|xw|.
							tol := 1e-7*float64(k+2)*mag[i*n+j] + 1e-30
							if d := math.Abs(got - want[i*n+j]); !(d <= tol) {
								t.Fatalf("seed %d: %dx%dx%d (ld %d %d %d): [%d,%d] = %g, want %g (|Δ| %g > %g)",
									seed, m, n, k, ldx, ldw, ldd, i, j, got, want[i*n+j], d, tol)
							}
						}
					}
				}
			})
		})
	}
}

// TestMatMulTDeterministic checks that an element's value depends on k
// alone: computing the product in pieces (as the goroutines do, and as the
// edge tiles do) gives the same bits as computing it whole.
func TestMatMulTDeterministic(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 4))
	for range 20 {
		m, n, k := 1+rng.IntN(50), 1+rng.IntN(50), rng.IntN(1500)
		x, w := randSlice(rng, m*k), randSlice(rng, n*k)
		whole := make([]float32, m*n)
		matMulT(whole, n, x, k, w, k, m, n, k)
		parts := make([]float32, m*n)
		for i := 0; i < m; {
			di := 1 + rng.IntN(5)
			di = min(di, m-i)
			for j := 0; j < n; {
				dj := min(1+rng.IntN(6), n-j)
				matMulT(parts[i*n+j:], n, x[i*k:], k, w[j*k:], k, di, dj, k)
				j += dj
			}
			i += di
		}
		for i := range whole {
			if math.Float32bits(whole[i]) != math.Float32bits(parts[i]) {
				t.Fatalf("seed %d: %dx%dx%d: element %d is %g whole, %g in pieces", seed, m, n, k, i, whole[i], parts[i])
			}
		}
		// And the parallel driver agrees with one goroutine.
		par := make([]float32, m*n)
		MatMulT(par, n, x, k, w, k, m, n, k)
		for i := range whole {
			if math.Float32bits(whole[i]) != math.Float32bits(par[i]) {
				t.Fatalf("seed %d: %dx%dx%d: element %d is %g serial, %g parallel", seed, m, n, k, i, whole[i], par[i])
			}
		}
	}
}

func TestDot(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 5))
	for _, n := range []int{0, 1, 7, 8, 9, 64, 1000, 4099} {
		a, b := randSlice(rng, n), randSlice(rng, n+3)
		want, mag := refMatMulT(a, n, b, n, 1, 1, n)
		got := float64(Dot(a, b))
		if d := math.Abs(got - want[0]); d > 1e-7*float64(n+2)*mag[0] {
			t.Fatalf("seed %d: Dot of %d = %g, want %g", seed, n, got, want[0])
		}
	}
}

func TestWidenBF16(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 6))
	for _, vector := range []bool{false, true} {
		t.Run(fmt.Sprintf("vector=%v", vector), func(t *testing.T) {
			withKernel(t, vector, func() {
				for _, n := range []int{0, 1, 8, 15, 16, 1001} {
					src := make([]uint16, n)
					for i := range src {
						src[i] = uint16(rng.Uint32())
					}
					dst := make([]float32, n)
					WidenBF16(dst, src)
					for i, h := range src {
						if got := math.Float32bits(dst[i]); got != uint32(h)<<16 {
							t.Fatalf("seed %d: n %d: element %d: %#08x, want %#08x", seed, n, i, got, uint32(h)<<16)
						}
					}
				}
			})
		})
	}
}

// benchMatMul measures MatMulT on an m×k by n×k product and reports
// GFLOP/s and the fraction of the register-only FMA peak measured in the
// same run on as many threads.
func benchMatMul(b *testing.B, m, n, k, threads int, bf16 bool) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(threads))
	rng := rand.New(rand.NewPCG(1, 2))
	x, w := randSlice(rng, m*k), randSlice(rng, n*k)
	h := make([]uint16, len(w))
	for i, v := range w {
		h[i] = uint16(math.Float32bits(v) >> 16)
	}
	dst := make([]float32, m*n)
	peak := PeakGFLOPS(threads, 200*time.Millisecond)
	b.ResetTimer()
	for b.Loop() {
		if bf16 {
			MatMulTBF16(dst, n, x, k, h, k, m, n, k)
		} else {
			MatMulT(dst, n, x, k, w, k, m, n, k)
		}
	}
	gflops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gflops, "GFLOP/s")
	b.ReportMetric(peak, "peak-GFLOP/s")
	b.ReportMetric(gflops/peak, "of-peak")
}

// BenchmarkMatMulT covers the shapes of a V2-Lite layer on 128 tokens:
// the projections (m 128), a routed expert (m 12: 128 tokens × 6 of 64
// experts) and the attention scores, with float32 and bfloat16 weights.
// The target is half the peak.
func BenchmarkMatMulT(b *testing.B) {
	for _, s := range []struct {
		name    string
		m, n, k int
	}{
		{"q_proj_128x3072x2048", 128, 3072, 2048},
		{"o_proj_128x2048x2048", 128, 2048, 2048},
		{"expert_up_12x1408x2048", 12, 1408, 2048},
		{"expert_down_12x2048x1408", 12, 2048, 1408},
		{"scores_512x32x576", 512, 32, 576},
	} {
		for _, w := range []string{"f32", "bf16"} {
			for _, threads := range []int{1, runtime.NumCPU()} {
				b.Run(fmt.Sprintf("%s/w=%s/threads=%d", s.name, w, threads), func(b *testing.B) {
					benchMatMul(b, s.m, s.n, s.k, threads, w == "bf16")
				})
			}
		}
	}
}

func BenchmarkWidenBF16(b *testing.B) {
	src := make([]uint16, 1<<20)
	dst := make([]float32, len(src))
	b.SetBytes(int64(2 * len(src)))
	for b.Loop() {
		WidenBF16(dst, src)
	}
}

// TestMatMulTBF16 checks that a bfloat16 weight gives exactly the product
// of its widened float32 matrix, on every kernel.
func TestMatMulTBF16(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, vector := range []bool{false, true} {
		t.Run(fmt.Sprintf("vector=%v", vector), func(t *testing.T) {
			withKernel(t, vector, func() {
				for range 30 {
					m, n, k := 1+rng.IntN(30), 1+rng.IntN(30), rng.IntN(1100)
					ldw := k + rng.IntN(3)
					x := randSlice(rng, m*k)
					h := make([]uint16, max(0, (n-1)*ldw+k))
					for i := range h {
						h[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
					}
					wide := make([]float32, len(h))
					WidenBF16(wide, h)
					got, want := make([]float32, m*n), make([]float32, m*n)
					MatMulTBF16(got, n, x, k, h, ldw, m, n, k)
					MatMulT(want, n, x, k, wide, ldw, m, n, k)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("seed %d: %dx%dx%d: element %d is %g from BF16, %g from float32", seed, m, n, k, i, got[i], want[i])
						}
					}
				}
			})
		})
	}
}

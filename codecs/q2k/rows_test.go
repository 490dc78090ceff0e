package q2k

import (
	"math"
	"math/rand/v2"
)

// e2m1Magnitudes are the non-negative FP4 (E2M1) values.
var e2m1Magnitudes = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// mxfp4Rows returns rows of n weights decoded from synthetic MXFP4 the way
// the reference vectors' "mxfp4" rows were made (testdata/ggml/README.md):
// per 32-weight group an E8M0 exponent, a row base from N(-7, 1.2) plus
// N(0, 0.8) jitter, rounded and clipped to [-12, -2]; E2M1 codes nearest to
// |N(0, s)| with s in [1.6, 2.4] and a random sign.
func mxfp4Rows(rng *rand.Rand, rows, n int) []float32 {
	x := make([]float32, rows*n)
	for r := range rows {
		base := -7 + 1.2*rng.NormFloat64()
		s := 1.6 + 0.8*rng.Float64()
		row := x[r*n : (r+1)*n]
		for g := 0; g < n; g += 32 {
			e := min(-2, max(-12, math.Round(base+0.8*rng.NormFloat64())))
			scale := float32(math.Ldexp(1, int(e)))
			for i := g; i < min(g+32, n); i++ {
				v := math.Abs(s * rng.NormFloat64())
				best := 0
				for k, m := range e2m1Magnitudes {
					if math.Abs(float64(m)-v) < math.Abs(float64(e2m1Magnitudes[best])-v) {
						best = k
					}
				}
				q := e2m1Magnitudes[best] * scale
				if rng.IntN(2) == 1 {
					q = -q
				}
				row[i] = q
			}
		}
	}
	return x
}

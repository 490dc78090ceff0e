package q2k

import (
	"math"
	"testing"

	"github.com/dsfs/dsfs/internal/fuzzcheck"
)

// TestVectorFitMatchesPortable compares the side-by-side fit of eight
// sub-blocks with fitRange lane by lane, bit for bit, on random sub-blocks:
// MXFP4-like, Gaussian over a wide range, constant, all zero, sparse,
// positive only, and with non-finite values.
func TestVectorFitMatchesPortable(t *testing.T) {
	if !haveVectorFit {
		t.Skip("no vector fit on this CPU")
	}
	rng, seed := newRand()
	for round := range 3000 {
		var x [8][16]float32
		for j := range x {
			kind := rng.IntN(8)
			for i := range x[j] {
				var v float64
				switch kind {
				case 0:
					v = 0.75
				case 1:
					v = 0
				case 2:
					if rng.IntN(8) == 0 {
						v = rng.NormFloat64()
					}
				case 3:
					v = math.Abs(rng.NormFloat64())
				case 4:
					v = rng.NormFloat64()
					if rng.IntN(16) == 0 {
						v = []float64{math.Inf(1), math.Inf(-1), math.NaN(), 1e38}[rng.IntN(4)]
					}
				case 5:
					v = float64(mxfp4Rows(rng, 1, 32)[i])
				default:
					v = rng.NormFloat64() * math.Exp(4*rng.NormFloat64())
				}
				x[j][i] = float32(v)
			}
		}
		var xt, wt, lt [16][8]float32
		for j := range x {
			for i, v := range x[j] {
				xt[i][j], wt[i][j] = v, abs32(v)
			}
		}
		var scale, negMin [8]float32
		fitRangeMADAVX2(&xt, &wt, &refSteps[0], len(refSteps), &scale, &negMin, &lt)
		for j := range x {
			var w [16]float32
			for i, v := range x[j] {
				w[i] = abs32(v)
			}
			ws, wm, wc := fitRange(&x[j], &w, refSteps, true)
			var c uint32
			for i := range 16 {
				c |= uint32(lt[i][j]) << (2 * i)
			}
			if math.Float32bits(scale[j]) != math.Float32bits(ws) || math.Float32bits(negMin[j]) != math.Float32bits(wm) || c != wc {
				t.Fatalf("seed %d, round %d, sub-block %v: vector fit (%g, %g, %08x), portable (%g, %g, %08x)", seed, round, x[j], scale[j], negMin[j], c, ws, wm, wc)
			}
		}
	}
}

// TestVectorRefMatchesPortable quantises random rows with both fits and
// expects the same bytes.
func TestVectorRefMatchesPortable(t *testing.T) {
	rng, seed := newRand()
	// Edge rows: zeros of both signs, constants, subnormals, values near
	// float32's limit, outliers, and non-finite values.
	edges := []func(i int) float64{
		func(int) float64 { return 0 },
		func(int) float64 { return math.Copysign(0, -1) },
		func(int) float64 { return 0.5 },
		func(int) float64 { return rng.NormFloat64() * 1e-40 },
		func(int) float64 { return 3e38 * (2*rng.Float64() - 1) },
		func(i int) float64 {
			if i%50 == 7 {
				return []float64{1e30, math.Inf(1), math.Inf(-1), math.NaN()}[i%4]
			}
			return rng.NormFloat64()
		},
	}
	for row := range 20 + len(edges) {
		x := mxfp4Rows(rng, 1, 2304)
		switch {
		case row >= 20:
			for i := range x {
				x[i] = float32(edges[row-20](i))
			}
		case row%2 == 1:
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp(3*rng.NormFloat64()))
			}
		}
		got, want := make([]byte, RowBytes(len(x))), make([]byte, RowBytes(len(x)))
		quantizeRef(got, x, true)
		quantizeRef(want, x, false)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("seed %d, row %d: byte %d is %#02x with the vector fit, %#02x with the portable one", seed, row, i, got[i], want[i])
			}
		}
	}
}

// TestVectorRequantizeMatchesPortable compares the vector requantisation
// with requantize on random blocks, scale codes and super-scales, zero
// and non-finite ones included.
func TestVectorRequantizeMatchesPortable(t *testing.T) {
	if !haveVectorFit {
		t.Skip("no vector requantisation on this CPU")
	}
	rng, seed := newRand()
	pick := func() float32 {
		switch rng.IntN(10) {
		case 0:
			return 0
		case 1:
			return float32([]float64{math.Inf(1), math.NaN(), 1e-40, 65504}[rng.IntN(4)])
		}
		return float32(rng.ExpFloat64() * 1e-3)
	}
	for round := range 2000 {
		var x [BlockWeights]float32
		copy(x[:], mxfp4Rows(rng, 1, BlockWeights))
		if round%4 == 0 {
			x[rng.IntN(BlockWeights)] = float32(math.Inf(1 - 2*rng.IntN(2)))
		}
		var sc [subBlocks]byte
		for j := range sc {
			sc[j] = byte(rng.IntN(256))
		}
		d, dmin := pick(), pick()
		var got, want [subBlocks]uint32
		for j := range got {
			got[j] = rng.Uint32()
			want[j] = got[j]
		}
		requantizeVector(&x, &sc, d, dmin, &got)
		requantize(&x, &sc, d, dmin, &want)
		if got != want {
			t.Fatalf("seed %d, round %d: d %g, dmin %g, scales %x: vector codes %08x, portable %08x", seed, round, d, dmin, sc, got, want)
		}
	}
}

// FuzzVectorRefMatchesPortable quantises arbitrary float32 bits, non-finite
// values included, through both reference paths and expects the same bytes.
func FuzzVectorRefMatchesPortable(f *testing.F) {
	f.Add(fuzzcheck.Float32Seed(BlockWeights))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := fuzzcheck.Float32s(data, BlockWeights)
		got, want := make([]byte, RowBytes(len(x))), make([]byte, RowBytes(len(x)))
		quantizeRef(got, x, true)
		quantizeRef(want, x, false)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("byte %d is %#02x with the vector fit, %#02x with the portable one", i, got[i], want[i])
			}
		}
	})
}

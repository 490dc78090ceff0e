package iq2xxs

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dsfs/dsfs/internal/fuzzcheck"
)

// TestVectorProjectionMatchesPortable compares the vector projection with
// the portable one on groups made to round to every off-grid code, with
// exact ties (integer distances, zero metric), non-finite distances and
// random metrics.
func TestVectorProjectionMatchesPortable(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector projection on this CPU")
	}
	r := newRand(t)
	tb := tables()
	var sb subBlock
	for u := range mapSize {
		if tb.codeMap[u] >= 0 {
			continue
		}
		scale := float32(r.ExpFloat64())
		kind := r.IntN(4)
		if kind == 2 {
			scale = 1e30
		}
		for i := range sb.xval {
			l := float64(u >> (2 * (i % 8)) & 3)
			var off float64
			switch kind {
			case 0: // every candidate at distance 0
				sb.waux[i] = 0
			case 1: // integer distances: many exact ties
				sb.waux[i] = 1
				scale = 1
			case 2: // distances overflow (ggml aborts; both take the first)
				sb.waux[i] = float32(1e10 * r.Float64())
			default:
				sb.waux[i] = float32(r.Float64())
				off = 1.8*r.Float64() - 0.9
			}
			sb.xval[i] = float32((2*l + 1 + off) * float64(scale))
		}
		var got, want [4]uint16
		sb.projectGroups(tb, 1/scale, scale, &got, true)
		sb.projectGroups(tb, 1/scale, scale, &want, false)
		if got != want {
			t.Fatalf("code %#04x, xval %v, waux %v, scale %g: vector projection gives %#04x, portable %#04x", u, sb.xval, sb.waux, scale, got, want)
		}
	}
}

// TestVectorQuantizeMatchesPortable quantises random rows, with and without
// importance, through both searches and expects the same bytes.
func TestVectorQuantizeMatchesPortable(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector neighbour search on this CPU")
	}
	r := newRand(t)
	const n = 2048
	// Edge rows: zeros of both signs, constants, subnormals, magnitudes whose
	// squares overflow (ggml aborts there) and outliers among small values.
	edges := []func(i int) float64{
		func(int) float64 { return 0 },
		func(int) float64 { return math.Copysign(0, -1) },
		func(int) float64 { return -0.125 },
		func(int) float64 { return r.NormFloat64() * 1e-40 },
		func(int) float64 { return 1e37 * r.NormFloat64() },
		func(i int) float64 {
			if i%100 == 3 {
				return 1e30
			}
			return r.NormFloat64()
		},
		func(i int) float64 { return float64(1 - 2*(i&1)) },
	}
	for row := range 40 + len(edges) {
		var x []float32
		switch {
		case row >= 40:
			x = make([]float32, n)
			for i := range x {
				x[i] = float32(edges[row-40](i))
			}
		case row%2 == 0:
			x = mxfp4Row(r, n)
		default:
			x = make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * math.Exp(4*r.NormFloat64()))
			}
		}
		var imp []float32
		if row%3 == 0 {
			imp = make([]float32, n)
			for i := range imp {
				imp[i] = float32(r.ExpFloat64())
			}
		}
		got, want := make([]byte, RowBytes(n)), make([]byte, RowBytes(n))
		quantize(got, x, imp, true)
		quantize(want, x, imp, false)
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("row %d (importance %t): byte %d is %#02x with the vector search, %#02x with the portable one", row, imp != nil, i, got[i], want[i])
		}
	}
}

// TestVectorsPortable runs the reference vectors through the portable
// search (TestVectors runs Quantize, which takes the vector search where
// the CPU has one).
func TestVectorsPortable(t *testing.T) {
	for _, c := range loadVectors(t) {
		got := make([]byte, len(c.Expect))
		quantize(got, c.Input, nil, false)
		if !bytes.Equal(got, c.Expect) {
			t.Fatalf("%s: byte %d differs from ggml's", c.Name, firstDiff(got, c.Expect))
		}
	}
}

// randomSubBlock fills sb with the prepared state of 32 random weights,
// MXFP4-like or Gaussian over a wide range, with a random importance.
func randomSubBlock(r *rand.Rand, sb *subBlock) {
	var x, qw [32]float32
	if r.IntN(2) == 0 {
		copy(x[:], mxfp4Row(r, 32))
	} else {
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(3*r.NormFloat64()))
		}
	}
	for i := range qw {
		qw[i] = float32(r.ExpFloat64())
	}
	var sumx2 float32
	for _, v := range x {
		sumx2 += float32(v * v)
	}
	sb.prepare(&x, &qw, sumx2/32, false)
}

// TestVectorTrialKernels compares the side-by-side trial kernels lane by
// lane, bit for bit, with the portable sums and errors.
func TestVectorTrialKernels(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector kernels on this CPU")
	}
	r := newRand(t)
	var sb subBlock
	for range 2000 {
		randomSubBlock(r, &sb)
		var codes [16][4]uint16
		var lanes [4][16]uint32
		for n := range codes {
			for k := range 4 {
				codes[n][k] = uint16(r.IntN(1 << 16))
				lanes[k][n] = uint32(codes[n][k])
			}
		}
		var sumqx, sumq2 [16]float32
		trialSumsAVX2(&sb.weight, &sb.xval, &lanes, &sumqx, &sumq2)
		for n := range codes {
			qx, q2 := sb.sums(&codes[n])
			if math.Float32bits(qx) != math.Float32bits(sumqx[n]) || math.Float32bits(q2) != math.Float32bits(sumq2[n]) {
				t.Fatalf("codes %x: vector sums %g, %g; portable %g, %g", codes[n], sumqx[n], sumq2[n], qx, q2)
			}
		}

		var iscales, scales, mse [8]float32
		for n := range iscales {
			iscales[n] = float32(r.ExpFloat64() * 4 / float64(sb.xval[r.IntN(32)]+1e-3))
			scales[n] = 1 / iscales[n]
		}
		qpErrorsAVX2(&sb.xval, &sb.weight, &iscales, &scales, &mse)
		for n := range mse {
			if want := qpError(&sb.xval, &sb.weight, iscales[n], scales[n]); math.Float32bits(want) != math.Float32bits(mse[n]) {
				t.Fatalf("iscale %g: vector error %g, portable %g", iscales[n], mse[n], want)
			}
		}
	}
}

// TestVectorWeightsMatchPortable compares prepare's vector square roots
// with the portable ones bit for bit, with and without importance
// (negative, zero and huge entries included).
func TestVectorWeightsMatchPortable(t *testing.T) {
	if !haveVectorSearch {
		t.Skip("no vector kernels on this CPU")
	}
	r := newRand(t)
	for round := range 2000 {
		var x, qw [32]float32
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(8*r.NormFloat64()))
			if r.IntN(16) == 0 {
				x[i] = float32([]float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(-1)}[r.IntN(4)])
			}
			qw[i] = float32([]float64{r.ExpFloat64(), 0, -1, 1e30, r.Float64()}[r.IntN(5)])
		}
		imp := &qw
		if round%2 == 0 {
			imp = nil
		}
		sigma2 := float32(r.ExpFloat64())
		var got, want subBlock
		got.prepare(&x, imp, sigma2, true)
		want.prepare(&x, imp, sigma2, false)
		for i := range x {
			if math.Float32bits(got.weight[i]) != math.Float32bits(want.weight[i]) && !(got.weight[i] != got.weight[i] && want.weight[i] != want.weight[i]) ||
				math.Float32bits(got.waux[i]) != math.Float32bits(want.waux[i]) && !(got.waux[i] != got.waux[i] && want.waux[i] != want.waux[i]) {
				t.Fatalf("x %g, importance %v, sigma2 %g: vector (%g, %g), portable (%g, %g)", x[i], imp != nil, sigma2, got.weight[i], got.waux[i], want.weight[i], want.waux[i])
			}
		}
		for i := range x {
			if math.Float32bits(got.xval[i]) != math.Float32bits(want.xval[i]) {
				t.Fatalf("x %g: vector magnitude %g, portable %g", x[i], got.xval[i], want.xval[i])
			}
		}
		if got.signs != want.signs {
			t.Fatalf("round %d: signs %x, portable %x", round, got.signs, want.signs)
		}
	}
}

// FuzzVectorMatchesPortable quantises arbitrary float32 bits, non-finite
// values included, through both paths and expects the same bytes.
func FuzzVectorMatchesPortable(f *testing.F) {
	f.Add(fuzzcheck.Float32Seed(BlockWeights))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !haveVectorSearch {
			t.Skip("no vector kernels on this CPU")
		}
		x := fuzzcheck.Float32s(data, BlockWeights)
		got, want := make([]byte, RowBytes(len(x))), make([]byte, RowBytes(len(x)))
		quantize(got, x, nil, true)
		quantize(want, x, nil, false)
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("byte %d is %#02x with the vector path, %#02x with the portable one", i, got[i], want[i])
		}
	})
}

package iq2xxs

import (
	"bytes"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/fuzzcheck"
)

// newRand returns a generator with a fresh seed, logged so that a failure can
// be replayed.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// e2m1 are the magnitudes of the FP4 E2M1 codes.
var e2m1 = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// mxfp4Row returns n weights decoded from synthetic MXFP4, the family of the
// reference vectors (testdata/ggml/README.md): per 32-weight group an E8M0
// exponent around a per-row base, codes nearest to |N(0, s)|, random signs.
func mxfp4Row(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	base := -7 + 1.2*r.NormFloat64()
	s := 1.6 + 0.8*r.Float64()
	for g := 0; g < n; g += 32 {
		e := math.Max(-12, math.Min(-2, math.Round(base+0.8*r.NormFloat64())))
		for i := g; i < g+32; i++ {
			a := math.Abs(s * r.NormFloat64())
			code := 0
			for c, v := range e2m1 {
				if math.Abs(v-a) < math.Abs(e2m1[code]-a) {
					code = c
				}
			}
			v := math.Ldexp(e2m1[code], int(e))
			if r.IntN(2) == 1 {
				v = -v
			}
			x[i] = float32(v)
		}
	}
	return x
}

// relRMS returns the RMS of x-y relative to the RMS of x.
func relRMS(x, y []float32) float64 {
	var num, den float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		num += d * d
		den += float64(x[i]) * float64(x[i])
	}
	return math.Sqrt(num / den)
}

func checkFinite(t *testing.T, what string, y []float32) {
	t.Helper()
	for i, v := range y {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("%s: dequantised weight %d is %g", what, i, v)
		}
	}
}

// TestMXFP4Error bounds the round-trip error on random MXFP4-decoded rows.
// ggml's own output on the reference MXFP4 rows has a relative RMS error of
// 0.34-0.36 per row and at most 0.43 in any 256-weight block; 600 random
// rows of this generator gave 0.33-0.38 per row and at most 0.48 per block.
// The bounds leave a margin over both.
func TestMXFP4Error(t *testing.T) {
	const (
		maxRow   = 0.45
		maxBlock = 0.6
	)
	r := newRand(t)
	rows := 16
	if testing.Short() {
		rows = 4
	}
	for _, n := range []int{5120, 2304} {
		for range rows {
			x := mxfp4Row(r, n)
			enc := make([]byte, RowBytes(n))
			Quantize(enc, x, nil)
			y := make([]float32, n)
			Dequantize(y, enc)
			checkFinite(t, "mxfp4 row", y)
			if e := relRMS(x, y); e > maxRow {
				t.Fatalf("%d-weight row: relative RMS error %.3f > %.2f", n, e, maxRow)
			}
			for b := 0; b < n; b += BlockWeights {
				if e := relRMS(x[b:b+BlockWeights], y[b:b+BlockWeights]); e > maxBlock {
					t.Fatalf("%d-weight row, block %d: relative RMS error %.3f > %.2f", n, b/BlockWeights, e, maxBlock)
				}
			}
			// Blocks are independent: encoding each alone gives the same bytes.
			for b := 0; b < n/BlockWeights; b++ {
				one := make([]byte, BlockBytes)
				Quantize(one, x[b*BlockWeights:(b+1)*BlockWeights], nil)
				if !bytes.Equal(one, enc[b*BlockBytes:(b+1)*BlockBytes]) {
					t.Fatalf("%d-weight row: block %d encodes differently alone", n, b)
				}
			}
		}
	}
}

// TestImportanceRows checks that importance weighs each row's weights by
// position: two rows quantised together equal each quantised alone.
func TestImportanceRows(t *testing.T) {
	r := newRand(t)
	const n = 512
	imp := make([]float32, n)
	for i := range imp {
		imp[i] = float32(0.25 + 4*r.Float64())
	}
	x := append(mxfp4Row(r, n), mxfp4Row(r, n)...)
	both := make([]byte, RowBytes(2*n))
	Quantize(both, x, imp)
	for row := range 2 {
		one := make([]byte, RowBytes(n))
		Quantize(one, x[row*n:(row+1)*n], imp)
		if !bytes.Equal(one, both[row*len(one):(row+1)*len(one)]) {
			t.Fatalf("row %d encodes differently alone", row)
		}
	}
	unit := make([]byte, RowBytes(2*n))
	Quantize(unit, x, nil)
	if bytes.Equal(unit, both) {
		t.Fatal("a non-uniform importance vector changed nothing")
	}
}

// TestEdgeInputs quantises degenerate rows: no panic, finite output below
// the fp16 overflow of d, and all-zero blocks where every magnitude is below
// ggml's 1e-15 threshold.
func TestEdgeInputs(t *testing.T) {
	r := newRand(t)
	fill := func(f func(i int) float32) []float32 {
		x := make([]float32, 512)
		for i := range x {
			x[i] = f(i)
		}
		return x
	}
	for _, c := range []struct {
		name     string
		x        []float32
		zeroDecd bool // the whole row decodes to zero
		overflow bool // beyond fp16Safe: only determinism is checked
	}{
		{"zeros", fill(func(int) float32 { return 0 }), true, false},
		{"negative zeros", fill(func(int) float32 { return float32(math.Copysign(0, -1)) }), true, false},
		{"constant", fill(func(int) float32 { return 0.5 }), false, false},
		{"constant negative", fill(func(int) float32 { return -0.125 }), false, false},
		{"constant 1e6", fill(func(int) float32 { return 1e6 }), false, false},
		{"constant tiny", fill(func(int) float32 { return 3e-20 }), true, false},
		{"subnormals", fill(func(int) float32 { return float32(r.NormFloat64() * 1e-40) }), true, false},
		{"smallest subnormal", fill(func(i int) float32 { return math.Float32frombits(uint32(i & 1)) }), true, false},
		{"1e-30 mixed with 1e3", fill(func(int) float32 {
			if r.IntN(8) == 0 {
				return float32(1e3 * r.NormFloat64())
			}
			return float32(1e-30 * r.NormFloat64())
		}), false, false},
		{"one 1e3 among 1e-30", fill(func(i int) float32 {
			if i == 300 {
				return 1e3
			}
			return float32(1e-30 * r.NormFloat64())
		}), false, false},
		{"near eps", fill(func(int) float32 { return float32(1e-15 * (1 + r.Float64())) }), false, false},
		{"single nonzero", fill(func(i int) float32 {
			if i == 77 {
				return -2
			}
			return 0
		}), false, false},
		{"alternating", fill(func(i int) float32 { return float32(1 - 2*(i&1)) }), false, false},
		{"one sign short of parity", fill(func(i int) float32 {
			if i%8 == 0 {
				return -1
			}
			return 1
		}), false, false},
		{"constant 1e8, d overflows fp16", fill(func(int) float32 { return 1e8 }), false, true},
		{"squares overflow float32 (ggml aborts)", fill(func(int) float32 { return float32(1e37 * r.NormFloat64()) }), false, true},
		{"1e30 among small values", fill(func(i int) float32 {
			if i%100 == 3 {
				return 1e30
			}
			return float32(r.NormFloat64())
		}), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			enc := make([]byte, RowBytes(len(c.x)))
			Quantize(enc, c.x, nil)
			y := make([]float32, len(c.x))
			Dequantize(y, enc)
			if !c.overflow {
				checkFinite(t, c.name, y)
			}
			if c.zeroDecd {
				if !bytes.Equal(enc, make([]byte, len(enc))) {
					t.Fatalf("encoded %x, want all zero", enc)
				}
				for i, v := range y {
					if v != 0 {
						t.Fatalf("weight %d decodes to %g, want 0", i, v)
					}
				}
			}
			again := make([]byte, len(enc))
			Quantize(again, c.x, nil)
			if !bytes.Equal(again, enc) {
				t.Fatal("a second run encodes differently")
			}
		})
	}
}

// fp16Safe is the largest magnitude for which the encoded super-scale d is
// sure to be finite: a sub-block scale never exceeds the largest magnitude,
// and d = max scale / 31 stays below fp16's overflow threshold 65520.
const fp16Safe = 2e6

func FuzzQuantize(f *testing.F) {
	f.Add(fuzzcheck.Float32Seed(BlockWeights))
	f.Add(make([]byte, 4*BlockWeights))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := fuzzcheck.Float32s(data, BlockWeights)
		if len(x) == 0 {
			x = make([]float32, BlockWeights)
		}
		for i, v := range x {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				x[i] = 0
			}
		}
		n := len(x)
		enc := make([]byte, RowBytes(n))
		Quantize(enc, x, nil)
		y := make([]float32, n)
		Dequantize(y, enc)

		// Fold the values into the range where the output must be finite.
		for i, v := range x {
			x[i] = float32(math.Mod(float64(v), fp16Safe))
		}
		Quantize(enc, x, nil)
		Dequantize(y, enc)
		checkFinite(t, "folded input", y)
	})
}

// TestConcurrent quantises one row from several goroutines at once and
// expects the serial bytes.
func TestConcurrent(t *testing.T) {
	r := newRand(t)
	x := mxfp4Row(r, 2304)
	want := make([]byte, RowBytes(len(x)))
	Quantize(want, x, nil)
	var wg sync.WaitGroup
	got := make([][]byte, 4)
	for i := range got {
		got[i] = make([]byte, len(want))
		wg.Go(func() { Quantize(got[i], x, nil) })
	}
	wg.Wait()
	for i, g := range got {
		if !bytes.Equal(g, want) {
			t.Fatalf("goroutine %d encoded differently", i)
		}
	}
}

package q2k

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Benchmarks quantise 64 MXFP4-decoded rows of 5120 weights per iteration on
// one goroutine, the shape ggml's reference figures were measured on
// (testdata/ggml/README.md: Q2_K ref ≈ 19.5 M weights/s, unit importance
// ≈ 8.3 M weights/s).
const benchRows, benchWidth = 64, 5120

func benchmarkQuantize(b *testing.B, quantize func(dst []byte, src []float32)) {
	src := mxfp4Rows(rand.New(rand.NewPCG(1, 2)), benchRows, benchWidth)
	dst := make([]byte, RowBytes(len(src)))
	b.SetBytes(int64(4 * len(src)))
	b.ReportAllocs()
	for b.Loop() {
		quantize(dst, src)
	}
	b.ReportMetric(float64(b.N)*float64(len(src))/b.Elapsed().Seconds()/1e6, "Mweights/s")
}

func BenchmarkQuantizeRef(b *testing.B) {
	benchmarkQuantize(b, QuantizeRef)
}

// ggmlRefRate is the single-thread rate of ggml's generic reference build for
// quantize_row_q2_K_ref on the same kind of rows, as recorded with the
// reference vectors (testdata/ggml/README.md: 19.3-19.6 M weights/s).
const ggmlRefRate = 19.5e6

// BenchmarkQuantizeRefVsPortable alternates the vector and the portable fit
// on the same rows in every iteration, so that their ratio holds on a loaded
// machine, and reports the vector rate against ggml's recorded one.
func BenchmarkQuantizeRefVsPortable(b *testing.B) {
	src := mxfp4Rows(rand.New(rand.NewPCG(1, 2)), benchRows, benchWidth)
	dst := make([]byte, RowBytes(len(src)))
	// Each iteration runs both, in alternating order so that a drift in
	// the machine's load does not favour either; x-portable is the median
	// of the iterations' ratios.
	var vec, port time.Duration
	var ratios []float64
	for b.Loop() {
		var dv, dp time.Duration
		for k := range 2 {
			t0 := time.Now()
			if (k+len(ratios))%2 == 0 {
				quantizeRef(dst, src, true)
				dv = time.Since(t0)
			} else {
				quantizeRef(dst, src, false)
				dp = time.Since(t0)
			}
		}
		vec, port = vec+dv, port+dp
		ratios = append(ratios, dp.Seconds()/dv.Seconds())
	}
	n := float64(b.N) * float64(len(src))
	b.ReportMetric(n/vec.Seconds(), "weights/s")
	b.ReportMetric(n/port.Seconds(), "portable-weights/s")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-portable")
	b.ReportMetric(n/vec.Seconds()/ggmlRefRate, "x-ggml-recorded")
}

func BenchmarkQuantizeUnit(b *testing.B) {
	qw := unitImportance(benchWidth)
	benchmarkQuantize(b, func(dst []byte, src []float32) { quantizeImportance(dst, src, qw) })
}

func BenchmarkDequantize(b *testing.B) {
	src := mxfp4Rows(rand.New(rand.NewPCG(1, 2)), benchRows, benchWidth)
	q := make([]byte, RowBytes(len(src)))
	QuantizeRef(q, src)
	y := make([]float32, len(src))
	b.SetBytes(int64(len(q)))
	b.ReportAllocs()
	for b.Loop() {
		Dequantize(y, q)
	}
	b.ReportMetric(float64(b.N)*float64(len(y))/b.Elapsed().Seconds()/1e6, "Mweights/s")
}

package q2k

import (
	"math/rand/v2"
	"testing"

	"github.com/dsfs/dsfs/internal/vecbench"
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
	vecbench.VsPortable(b, len(src), ggmlRefRate, func(vector bool) { quantizeRef(dst, src, vector) })
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

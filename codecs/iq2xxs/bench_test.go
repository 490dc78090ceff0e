package iq2xxs

import (
	"testing"

	"github.com/dsfs/dsfs/internal/vecbench"
)

// benchRows returns the 5120-wide MXFP4-decoded rows of the reference
// vectors: the gate/up expert rows the q2 view quantises most.
func benchRows(b *testing.B) []float32 {
	for _, c := range loadVectors(b) {
		if c.Name == "mxfp4_gate_up_5120" {
			return c.Input
		}
	}
	b.Fatal("no mxfp4_gate_up_5120 case in the vectors")
	return nil
}

// BenchmarkQuantize measures one thread quantising 5120-wide MXFP4-decoded
// rows with unit importance. ggml's generic C reference does about 3.3 M
// weights/s on the project's machine class.
//
// Its sub-benchmarks are the vector neighbour search (the one Quantize runs
// where the CPU has it) and the portable Go one, so that the ratio of the
// two comes from one run.
func BenchmarkQuantize(b *testing.B) {
	for _, bc := range []struct {
		name   string
		vector bool
	}{{"vector", true}, {"scalar", false}} {
		b.Run(bc.name, func(b *testing.B) { benchmarkQuantize(b, bc.vector) })
	}
}

func benchmarkQuantize(b *testing.B, vector bool) {
	src := benchRows(b)
	dst := make([]byte, RowBytes(len(src)))
	tables()
	b.SetBytes(int64(4 * len(src)))
	b.ReportAllocs()
	for b.Loop() {
		quantize(dst, src, nil, vector)
	}
	b.ReportMetric(float64(b.N)*float64(len(src))/b.Elapsed().Seconds(), "weights/s")
}

// ggmlRate is the single-thread rate of ggml's generic reference build on
// the same kind of rows, as recorded with the reference vectors
// (testdata/ggml/README.md, "Throughput of the C reference": 3.3-3.4 M
// weights/s for IQ2_XXS with a unit imatrix).
const ggmlRate = 3.3e6

// BenchmarkQuantizeVsPortable alternates the vector and the portable
// search on the same rows in every iteration, so that their ratio holds on
// a loaded machine, and reports the vector rate against ggml's recorded
// one.
func BenchmarkQuantizeVsPortable(b *testing.B) {
	src := benchRows(b)
	dst := make([]byte, RowBytes(len(src)))
	tables()
	vecbench.VsPortable(b, len(src), ggmlRate, func(vector bool) { quantize(dst, src, nil, vector) })
}

func BenchmarkDequantize(b *testing.B) {
	src := benchRows(b)
	enc := make([]byte, RowBytes(len(src)))
	Quantize(enc, src, nil)
	dst := make([]float32, len(src))
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		Dequantize(dst, enc)
	}
	b.ReportMetric(float64(b.N)*float64(len(src))/b.Elapsed().Seconds(), "weights/s")
}

// Package vecbench times a codec's vector (SIMD) path against its portable
// Go one in a benchmark.
package vecbench

import (
	"slices"
	"testing"
	"time"
)

// VsPortable runs quantize(true), the vector path, and quantize(false),
// the portable one, on the same weights rows in every iteration, so that
// their ratio holds on a loaded machine. It reports the vector and the
// portable rate in weights/s, x-portable (the median of the iterations'
// ratios) and x-ggml-recorded, the vector rate against ggmlRate, the
// single-thread rate recorded for ggml's reference on the same rows.
func VsPortable(b *testing.B, weights int, ggmlRate float64, quantize func(vector bool)) {
	// Each iteration runs both, in alternating order so that a drift in
	// the machine's load does not favour either.
	var vec, port time.Duration
	var ratios []float64
	for b.Loop() {
		var dv, dp time.Duration
		for k := range 2 {
			t0 := time.Now()
			if (k+len(ratios))%2 == 0 {
				quantize(true)
				dv = time.Since(t0)
			} else {
				quantize(false)
				dp = time.Since(t0)
			}
		}
		vec, port = vec+dv, port+dp
		ratios = append(ratios, dp.Seconds()/dv.Seconds())
	}
	n := float64(b.N) * float64(weights)
	b.ReportMetric(n/vec.Seconds(), "weights/s")
	b.ReportMetric(n/port.Seconds(), "portable-weights/s")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-portable")
	b.ReportMetric(n/vec.Seconds()/ggmlRate, "x-ggml-recorded")
}

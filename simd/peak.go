package simd

import (
	"sync"
	"time"
)

// PeakGFLOPS measures the float32 rate of the matrix kernel's arithmetic
// on threads goroutines at once, in GFLOP/s (an FMA counts two): each runs
// a loop of independent multiply-adds on registers only, so the figure is
// what the cores can do without memory, the ceiling MatMulT is measured
// against. It runs for about d.
func PeakGFLOPS(threads int, d time.Duration) float64 {
	const chunk = 1 << 20
	// Calibrate on one goroutine: iterations per second.
	start := time.Now()
	n := 0
	for time.Since(start) < d/10 {
		peakIterations(chunk)
		n += chunk
	}
	iters := max(chunk, int(float64(n)*float64(d)/float64(time.Since(start))))
	var wg sync.WaitGroup
	flops := make([]float64, threads)
	start = time.Now()
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flops[t] = peakIterations(iters)
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	var total float64
	for _, f := range flops {
		total += f
	}
	return total / el / 1e9
}

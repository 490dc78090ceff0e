package views

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
)

// BenchmarkBuild builds every view of the released layouts (synth's
// full-sparse presets: real headers, data as holes), as a mount does after
// opening the catalog. Per source tensor it reports the bytes the build
// allocates (alloc-B/tensor, garbage included, which the GC must keep up
// with) and the heap the built views keep (retained-B/tensor); cpu-s/op is
// the CPU time of all threads, which is what a mount on a busy machine
// waits for.
func BenchmarkBuild(b *testing.B) {
	for _, preset := range []string{"v41-full-sparse", "v4-full-sparse"} {
		b.Run(preset, func(b *testing.B) {
			dir := b.TempDir()
			if err := synth.Write(preset, dir); err != nil {
				b.Fatal(err)
			}
			cat, err := checkpoint.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer cat.Close()
			tensors := float64(len(cat.Tensors))
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			s, err := Build(cat, Options{})
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			s.Close()
			retained := float64(m1.HeapAlloc-m0.HeapAlloc) / tensors
			runtime.ReadMemStats(&m0)
			cpu0 := cpuTime(b)
			ops := 0
			for b.Loop() {
				s, err := Build(cat, Options{})
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				ops++
			}
			cpu := cpuTime(b) - cpu0
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(ops)/tensors, "alloc-B/tensor")
			b.ReportMetric(cpu.Seconds()/float64(ops), "cpu-s/op")
			b.ReportMetric(retained, "retained-B/tensor")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

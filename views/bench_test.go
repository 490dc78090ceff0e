package views

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
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

// BenchmarkTraceCost reads the whole trace/ of prompt sets of several
// shapes and reports the live heap it grew to (peak-MiB, sampled every 5
// ms) against trace.Cost's estimate (estimate-MiB), which --trace-memory-mb
// is checked against at mount: the estimate must stay above. On the tiny
// presets the estimate's fixed 512 MiB of weight scratch dominates.
func BenchmarkTraceCost(b *testing.B) {
	for _, preset := range []string{"v2lite-tiny", "v4-tiny", "v41-tiny"} {
		dir := b.TempDir()
		if err := synth.Write(preset, dir); err != nil {
			b.Fatal(err)
		}
		for _, shape := range [][2]int{{1000, 1}, {200, 2}, {2, 2048}, {1, 4096}} {
			b.Run(fmt.Sprintf("%s/%dx%d", preset, shape[0], shape[1]), func(b *testing.B) {
				prompts := writePrompts(b, shape[0], shape[1])
				for range b.N {
					peak, estimate := traceCostRun(b, dir, prompts)
					b.ReportMetric(float64(peak>>20), "peak-MiB")
					b.ReportMetric(float64(estimate>>20), "estimate-MiB")
				}
			})
		}
	}
}

// traceCostRun builds trace/ for prompts, reads every file of it, and
// returns the peak live heap above where it started and the estimate.
func traceCostRun(b *testing.B, dir, prompts string) (peak, estimate int64) {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var top atomic.Uint64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			top.Store(max(top.Load(), m.HeapAlloc))
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	s, err := Build(cat, Options{Views: []string{"trace"}, Values: map[string]string{"trace-prompts": prompts, "device": "cpu", "trace-memory-mb": "1000000"}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cache := blockcache.New(16<<20, 2)
	defer cache.Close()
	var walk func(n *vfile.Node)
	walk = func(n *vfile.Node) {
		if n.File != nil || n.Doc != nil {
			readAll(b, n, cache)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(s.Root)
	close(stop)
	<-stopped
	return int64(top.Load()) - int64(base.HeapAlloc), s.WorkingMemory()
}

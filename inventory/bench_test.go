package inventory

import (
	"context"
	"io"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
)

// peakMemory samples the memory the Go runtime holds from the OS until
// stopped and returns the largest sample: the peak footprint of what ran
// meanwhile, page-granular and GC-timing dependent but close to the RSS.
func peakMemory() (stop func() uint64) {
	var mu sync.Mutex
	var peak uint64
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	read := func() {
		metrics.Read(sample)
		mu.Lock()
		peak = max(peak, sample[0].Value.Uint64()-readReleased())
		mu.Unlock()
	}
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() uint64 {
		close(done)
		read()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// readReleased is the memory the runtime has returned to the OS but keeps
// mapped, which the RSS does not count.
func readReleased() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// BenchmarkManifestFullSparse builds manifest.json of the v41-full-sparse
// preset (48 shards, ~96k tensors, ~475 GiB) from its headers, as `dsfs
// inspect --no-hash --json` does: catalog, records, summary, JSON. Aim:
// under 5 s and 500 MB.
func BenchmarkManifestFullSparse(b *testing.B) {
	dir := b.TempDir()
	if err := synth.Write("v41-full-sparse", dir); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	stop := peakMemory()
	var w countingWriter
	for b.Loop() {
		cat, err := checkpoint.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		m, err := New(cat, Options{NoHash: true}).Manifest(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		w.n = 0
		if err := m.WriteJSON(&w); err != nil {
			b.Fatal(err)
		}
		cat.Close()
	}
	b.ReportMetric(float64(stop())/1e6, "peak-MB")
	b.ReportMetric(float64(w.n)/1e6, "manifest-MB")
}

// benchSpec is a checkpoint of about 700 MB in one shard whose bytes are
// mixed like the real checkpoint's: mostly MXFP4 experts of the real size
// (2304 x 5120) and FP8 Engram rows, some FP8 attention, a little BF16 and
// F32.
func benchSpec() synth.Spec {
	s := synth.TinySpec()
	s.Seed = 7
	s.Hidden, s.MoEInter, s.Experts, s.MTPExperts = 5120, 2304, 8, 4
	s.EngramRows, s.EngramRowsByLayer = 1<<19, nil
	s.MaxShardBytes = 1 << 40
	return s
}

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHashVsSha256sum hashes one shard (warm in the page cache) with
// coreutils sha256sum and, on one core, with the inventory's reader three
// ways: sha256 alone over the same buffers ("hash"), and sha256 with the
// value checks ("check", what a record costs). It reports per-core
// throughput from CPU time, so that other load on the machine does not
// count: hash/sha256sum should be at least 0.9, check-overhead-% at most
// 30.
func BenchmarkHashVsSha256sum(b *testing.B) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		b.Skip("no sha256sum")
	}
	dir := b.TempDir()
	if err := synth.WriteSpec(benchSpec(), dir); err != nil {
		b.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	sh := cat.Shards[0]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := newScanner(new(Progress))
	ctx := context.Background()
	noCheck := func([]byte) {}
	var sumCPU, hashCPU, checkCPU time.Duration
	b.SetBytes(sh.Size)
	for b.Loop() {
		cmd := exec.Command("sha256sum", sh.Path)
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		sumCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()

		start := threadCPU()
		for _, t := range sh.Tensors {
			if _, err := s.stream(ctx, t, 1, nil, noCheck); err != nil {
				b.Fatal(err)
			}
		}
		hashCPU += threadCPU() - start

		start = threadCPU()
		for _, t := range sh.Tensors {
			if _, err := s.scan(ctx, t, false); err != nil {
				b.Fatal(err)
			}
		}
		checkCPU += threadCPU() - start
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * float64(sh.Size) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(sumCPU), "sha256sum-MB/s/core")
	b.ReportMetric(mbps(hashCPU), "hash-MB/s/core")
	b.ReportMetric(mbps(checkCPU), "check-MB/s/core")
	b.ReportMetric(sumCPU.Seconds()/hashCPU.Seconds(), "hash/sha256sum")
	b.ReportMetric(sumCPU.Seconds()/checkCPU.Seconds(), "check/sha256sum")
	b.ReportMetric(100*(checkCPU.Seconds()/hashCPU.Seconds()-1), "check-overhead-%")
}

// BenchmarkAllCores reads the benchSpec checkpoint with every core, as
// manifest.json does; MB/s is the rate of the whole machine.
func BenchmarkAllCores(b *testing.B) {
	dir := b.TempDir()
	if err := synth.WriteSpec(benchSpec(), dir); err != nil {
		b.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	var total int64
	for _, t := range cat.Tensors {
		total += t.Size
	}
	b.SetBytes(total)
	for b.Loop() {
		if _, err := New(cat, Options{}).Records(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

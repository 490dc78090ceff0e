package views

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
)

// BenchmarkNVFP4FirstRead reads the first nvfp4/ shard whole through a
// vfile.Reader, in requests of the sizes a FUSE mount sends, with a fresh
// block cache each time: the server's side of a first read through the
// mount, without FUSE. The source is v41-tiny, or the checkpoint in
// $DSFS_BENCH_SRC (bench/run.sh's v41-bench, for its shard sizes); run it
// twice and keep the second for a source hot in the page cache. cpu-ms/GB
// is the process's CPU time, block computations included, as bench/run.sh
// reports a server's.
func BenchmarkNVFP4FirstRead(b *testing.B) {
	dir := os.Getenv("DSFS_BENCH_SRC")
	if dir == "" {
		dir = b.TempDir()
		if err := synth.Write("v41-tiny", dir); err != nil {
			b.Fatal(err)
		}
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	s, err := Build(cat, Options{Views: []string{"nvfp4"}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	f := s.Root.Child("nvfp4").Child(cat.Shards[0].Name).File
	b.Logf("%s: %d bytes in %d segments", cat.Shards[0].Name, f.Size(), len(f.Segments()))
	for _, n := range []int{128 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			benchmarkFirstRead(b, f, n)
		})
	}
}

// benchmarkFirstRead reads f whole in requests of n bytes through a
// vfile.Reader with a fresh block cache each time, and reports the
// process's CPU time per GB read, block computations included.
func benchmarkFirstRead(b *testing.B, f *vfile.File, n int) {
	b.SetBytes(f.Size())
	p := make([]byte, n)
	cpu0 := cpuTime(b)
	for b.Loop() {
		cache := blockcache.New(256<<20, runtime.NumCPU())
		r := vfile.NewReader(f, cache)
		for off := int64(0); ; off += int64(n) {
			if _, err := r.ReadAt(p, off); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		cache.Close()
	}
	gb := float64(b.N) * float64(f.Size()) / 1e9
	b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/gb, "cpu-ms/GB")
}

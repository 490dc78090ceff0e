package q2

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
)

// benchQ2Source writes a checkpoint with one routed expert of the real
// DeepSeek-V4.1-Flash geometry (w1, w3 2304 x 5120; w2 5120 x 2304: 35 M
// weights) in one shard, and returns it opened.
func benchQ2Source(b *testing.B) *checkpoint.Catalog {
	b.Helper()
	spec := synth.TinySpec()
	spec.Hidden, spec.MoEInter = 5120, 2304
	spec.Layers, spec.DenseLayers, spec.Experts, spec.ActiveExperts = 1, 0, 1, 1
	spec.CompressRatios, spec.EngramLayers, spec.EngramRowsByLayer, spec.MTPLayers, spec.VisionLayers = nil, nil, nil, 0, 0
	spec.KVSourceLayers, spec.IndexSourceLayers, spec.DSparkTargets = nil, nil, nil
	spec.MaxShardBytes = 1 << 30
	dir := b.TempDir()
	if err := synth.WriteSpec(spec, dir); err != nil {
		b.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cat.Close() })
	return cat
}

// readQ2Shard reads the q2/ shard of cat in 1 MiB requests, as the mount
// receives them, through a fresh in-memory cache, and returns its size.
func readQ2Shard(b *testing.B, cat *checkpoint.Catalog, opt Options) int64 {
	b.Helper()
	q, err := New(cat, opt)
	if err != nil {
		b.Fatal(err)
	}
	f := q.Shards[0].File
	cache := blockcache.New(1<<30, runtime.GOMAXPROCS(0))
	defer cache.Close()
	n, err := io.CopyBuffer(io.Discard, io.NewSectionReader(vfile.NewReader(f, cache), 0, f.Size()), make([]byte, 1<<20))
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkQ2ShardRead quantises a whole shard: run with -cpu 1,N to see
// it scale with cores.
func BenchmarkQ2ShardRead(b *testing.B) {
	cat := benchQ2Source(b)
	var weights int64
	for _, t := range cat.Tensors {
		if ok, _ := quantisable(t); ok {
			weights += 2 * t.Shape[0] * t.Shape[1]
		}
	}
	for b.Loop() {
		b.SetBytes(readQ2Shard(b, cat, Options{}))
	}
	b.ReportMetric(float64(weights)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mweights/s")
}

// BenchmarkQ2ShardReadDiskCache reads a shard whose blocks are all in the
// disk cache (a remount), through an empty in-memory cache.
func BenchmarkQ2ShardReadDiskCache(b *testing.B) {
	cat := benchQ2Source(b)
	dc, err := diskcache.Open(b.TempDir(), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	readQ2Shard(b, cat, Options{DiskCache: dc})
	b.ResetTimer()
	for b.Loop() {
		b.SetBytes(readQ2Shard(b, cat, Options{DiskCache: dc}))
	}
	if st := dc.Stats(); st.Hits == 0 {
		b.Fatalf("no disk cache hits: %+v", st)
	}
}

// BenchmarkSourceShardRead reads the source shard from the page cache in
// 1 MiB preads: the speed a cached q2/ shard is measured against.
func BenchmarkSourceShardRead(b *testing.B) {
	cat := benchQ2Source(b)
	sh := cat.Shards[0]
	f, err := os.Open(sh.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(sh.Size)
	for b.Loop() {
		if _, err := io.CopyBuffer(io.Discard, io.NewSectionReader(f, 0, sh.Size), buf); err != nil {
			b.Fatal(err)
		}
	}
}

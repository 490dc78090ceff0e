package synth

import (
	"testing"
)

// specBytes is the size of every shard s writes.
func specBytes(b *testing.B, s Spec) int64 {
	shards, err := planShards(newLayout(&s), s.MaxShardBytes)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, sh := range shards {
		n += sh.layout.Size
	}
	return n
}

func benchmarkPreset(b *testing.B, name string) {
	i := 0
	for ; Presets()[i].Name != name; i++ {
	}
	s := Presets()[i].Spec
	if !s.Sparse {
		b.SetBytes(specBytes(b, s))
	}
	dir := b.TempDir()
	getTables()
	for b.Loop() {
		if err := WriteSpec(s, dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteBench generates the 2.8 GiB v41-bench preset; MB/s is
// the generation rate, writes into the page cache included.
func BenchmarkWriteBench(b *testing.B) {
	if testing.Short() {
		b.Skip("writes 2.8 GiB")
	}
	benchmarkPreset(b, "v41-bench")
}

func BenchmarkWriteTiny(b *testing.B) { benchmarkPreset(b, "v41-tiny") }

// BenchmarkWriteFullSparse lays out and writes the headers of the
// 96k-tensor v41-full-sparse preset.
func BenchmarkWriteFullSparse(b *testing.B) { benchmarkPreset(b, "v41-full-sparse") }

// The fill benchmarks measure generation alone, into memory.

func BenchmarkFillMXFP4(b *testing.B) {
	t := getTables()
	w, s := make([]byte, 2048*1024), make([]byte, 2048*64)
	b.SetBytes(int64(len(w) + len(s)))
	for b.Loop() {
		fillMXFP4(t, newChunkRNG(1, "bench", 0), mxfp4Centre, w, s, 2048)
	}
}

func BenchmarkFillFP8(b *testing.B) {
	t := getTables()
	w, s := make([]byte, 1<<20), make([]byte, 1<<10)
	b.SetBytes(int64(len(w) + len(s)))
	for b.Loop() {
		fillFP8(t, newChunkRNG(1, "bench", 0), w, s)
	}
}

package views

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/fp8ckpt"
	"github.com/dsfs/dsfs/synth"
)

// BenchmarkGGUFFirstRead reads a recipe's single GGUF whole through a
// vfile.Reader in 1 MiB requests with a fresh block cache each time: the
// server's side of llama.cpp's MAP_POPULATE first load, without FUSE. The
// source is v4-tiny (MXFP4: experts repacked, FP8 dense to Q8_0) or the
// checkpoint in $DSFS_BENCH_SRC (bench/gguf-load.sh's v4-bench or
// v3-bench); the recipe is $DSFS_BENCH_RECIPE, MXFP4 unless set. With
// DSFS_BENCH_FP8=1 a BF16 V2/V3 source is first turned into DeepSeek-V3's
// FP8 layout, as V3 and R1 are published, so that BF16 and Q8_0 decode
// FP8 blocks. Run it with -cpuprofile to see where a first load goes.
func BenchmarkGGUFFirstRead(b *testing.B) {
	dir := os.Getenv("DSFS_BENCH_SRC")
	if dir == "" {
		dir = b.TempDir()
		if err := synth.Write("v4-tiny", dir); err != nil {
			b.Fatal(err)
		}
	}
	if os.Getenv("DSFS_BENCH_FP8") == "1" {
		fp8 := filepath.Join(b.TempDir(), filepath.Base(dir))
		if err := fp8ckpt.Write(dir, fp8); err != nil {
			b.Fatal(err)
		}
		dir = fp8
	}
	recipe := os.Getenv("DSFS_BENCH_RECIPE")
	if recipe == "" {
		recipe = "MXFP4"
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	s, err := Build(cat, Options{Views: []string{"gguf"}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := s.Root.Child("gguf").Child(recipe)
	if r == nil {
		b.Fatalf("%s: no gguf/%s", dir, recipe)
	}
	n := r.Child(filepath.Base(dir) + "-" + recipe + ".gguf")
	if n == nil || n.File == nil {
		b.Fatalf("gguf/%s: no single file among %d entries", recipe, len(r.Children))
	}
	benchmarkFirstRead(b, n.File, 1<<20)
}

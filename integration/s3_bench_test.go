package integration

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/s3test"
	"github.com/dsfs/dsfs/internal/warmmem"
	"github.com/dsfs/dsfs/objstore"
)

// BenchmarkS3FirstRead is bench/run.sh's object-store row: a checkpoint
// ($DSFS_BENCH_SRC, else the tiny one) in a SeaweedFS bucket on loopback,
// mounted from there with an empty chunk cache; it reads nvfp4/'s first
// shard once, then GETs the same shard's source object whole with
// objstore's client, and reports both rates, their ratio and the bytes
// the mount fetched per byte it served (readahead waste and header reads).
// Before each timed read it touches twice the shard's size in fresh
// memory (see warmmem): the mount fills the chunk cache and the page cache
// of the file it serves, the GET a buffer.
func BenchmarkS3FirstRead(b *testing.B) {
	src := tinySrc
	if s := os.Getenv("DSFS_BENCH_SRC"); s != "" {
		src = s
	}
	const shard = "model-00001-of-00002.safetensors"
	if _, err := os.Stat(filepath.Join(src, shard)); err != nil {
		b.Skipf("%s has no %s (bench/run.sh passes v41-bench as DSFS_BENCH_SRC)", src, shard)
	}
	srv := s3test.Start(b)
	srv.CreateBucket("bench")
	ents, err := os.ReadDir(src)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				b.Fatal(err)
			}
			srv.Put("bench", "ckpt/"+e.Name(), data)
		}
	}
	b.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	b.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"} {
		b.Setenv(v, "")
		os.Unsetenv(v)
	}
	url := srv.URL("bench", "ckpt")
	fi, err := os.Stat(filepath.Join(src, shard))
	if err != nil {
		b.Fatal(err)
	}
	touch := warmmem.Benchmark(b, 2*fi.Size()+512<<20)
	for b.Loop() {
		touch()
		mountRate, perByte := s3MountRead(b, url, shard)
		touch()
		getRate := s3PlainGet(b, url, shard)
		b.ReportMetric(mountRate, "mount-MB/s")
		b.ReportMetric(getRate, "get-MB/s")
		b.ReportMetric(mountRate/getRate, "ratio")
		b.ReportMetric(perByte, "fetched/read")
	}
}

// s3MountRead mounts url with an empty chunk cache and reads nvfp4/shard
// once: its rate in MB/s, and the bytes fetched per byte read.
func s3MountRead(b *testing.B, url, shard string) (float64, float64) {
	b.Helper()
	m := startMount(b, url, "--cache-dir", b.TempDir(), "--views", "nvfp4")
	defer m.stop(b)
	f, err := os.Open(m.path("nvfp4", shard))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	n, err := io.CopyBuffer(io.Discard, f, make([]byte, 1<<20))
	if err != nil {
		b.Fatal(err)
	}
	rate := float64(n) / time.Since(start).Seconds() / 1e6
	st := objectStats(b, m)
	return rate, float64(st["bytes_fetched"]) / float64(n)
}

// s3PlainGet GETs the source object of shard whole, with the client and
// configuration a mount uses, and returns the rate in MB/s.
func s3PlainGet(b *testing.B, url, shard string) float64 {
	b.Helper()
	// Its log would land in the middle of the benchmark's line.
	bk, err := objstore.Open(context.Background(), url, objstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	start := time.Now()
	data, err := bk.Get(context.Background(), shard, 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	return float64(len(data)) / time.Since(start).Seconds() / 1e6
}

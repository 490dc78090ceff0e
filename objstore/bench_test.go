package objstore

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dsfs/dsfs/internal/s3test"
	"github.com/dsfs/dsfs/internal/warmmem"
)

// BenchmarkSequentialRead reads a 256 MiB object sequentially through
// Object.ReadAt in 1 MiB reads with a cold cache, and with one plain GET
// of the whole object through the same client, and reports both rates
// and their ratio. DSFS_BENCH_PREFETCHES sets Options.Prefetches, to
// compare settings. Each timed read follows a touch of the memory the
// chunk cache will fill (see warmmem).
func BenchmarkSequentialRead(b *testing.B) {
	const size = 256 << 20
	srv := s3test.Start(b)
	b.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	b.Setenv("AWS_ACCESS_KEY_ID", "")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "")
	b.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	srv.CreateBucket("bench")
	data := randomBytes(rand.New(rand.NewPCG(1, 2)), size)
	srv.Put("bench", "obj", data)
	data = nil
	var objTime, getTime time.Duration
	prefetches, _ := strconv.Atoi(os.Getenv("DSFS_BENCH_PREFETCHES"))
	buf := make([]byte, 1<<20)
	touch := warmmem.Benchmark(b, size+256<<20)
	for b.Loop() {
		bk, err := Open(context.Background(), srv.URL("bench", ""), Options{CacheDir: b.TempDir(), Prefetches: prefetches})
		if err != nil {
			b.Fatal(err)
		}
		o, err := bk.Open(context.Background(), "obj")
		if err != nil {
			b.Fatal(err)
		}
		touch()
		start := time.Now()
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := o.ReadAt(buf, off); err != nil && err != io.EOF {
				b.Fatal(err)
			}
		}
		objTime += time.Since(start)

		touch()
		start = time.Now()
		out, err := bk.client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bk.bucket, Key: &o.key})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, out.Body, buf)
		out.Body.Close()
		if err != nil || n != size {
			b.Fatalf("plain GET: %d bytes, %v", n, err)
		}
		getTime += time.Since(start)
		b.Logf("stats: %+v", bk.Stats())
		bk.Close()
	}
	mb := float64(size) / 1e6 * float64(b.N)
	b.ReportMetric(mb/objTime.Seconds(), "objstore-MB/s")
	b.ReportMetric(mb/getTime.Seconds(), "get-MB/s")
	b.ReportMetric(getTime.Seconds()/objTime.Seconds(), "ratio")
}

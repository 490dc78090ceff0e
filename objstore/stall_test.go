package objstore

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/s3test"
)

// TestStalledServer has a server that accepts connections and never
// answers: the request must fail, naming the object, within the bounds of
// the response-header timeout and the retry budget, not hang.
func TestStalledServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer l.Close()
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				io.Copy(io.Discard, c) // until the client hangs up
				c.Close()
			})
		}
	})
	anonymous(t, &s3test.Server{Endpoint: "http://" + l.Addr().String()})
	b, err := Open(context.Background(), "s3://stalled", Options{CacheDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	start := time.Now()
	_, err = b.Open(context.Background(), "obj")
	took := time.Since(start)
	t.Logf("after %v: %v", took, err)
	if err == nil || !strings.Contains(err.Error(), "s3://stalled/obj") || took > 15*time.Second {
		t.Errorf("Open against a stalled server: %v after %v; want an error naming s3://stalled/obj within 15 s", err, took)
	}
}

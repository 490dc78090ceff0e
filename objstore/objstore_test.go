package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/s3test"
	"github.com/dsfs/dsfs/sourcefile"
)

// anonymous points the AWS configuration at srv with no credentials to
// find anywhere, as on a machine that has none.
func anonymous(t *testing.T, srv *s3test.Server) {
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	for _, k := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"} {
		t.Setenv(k, "")
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// rng returns a random source seeded afresh, or from $DSFS_SEED, and
// prints the seed when the test fails.
func rng(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DSFS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed: DSFS_SEED=%d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// env is a bucket on a server, opened through objstore.
type env struct {
	srv    *s3test.Server
	prefix string // key prefix of the test's objects in bucket testBucket
	cache  string // chunk cache directory
	b      *Bucket
	logBuf *bytes.Buffer
}

// quiet is the logger of Buckets whose log the test does not look at.
var quiet = slog.New(slog.DiscardHandler)

// testBucket is the one bucket of each server: SeaweedFS takes seconds
// to allocate the volumes of a new bucket, so tests use prefixes in one.
const testBucket = "test"

var prefixSeq int

// newEnv opens a fresh prefix of testBucket with a fresh cache.
func newEnv(t *testing.T, srv *s3test.Server, opt Options) *env {
	t.Helper()
	prefixSeq++
	e := &env{srv: srv, prefix: "t" + strconv.Itoa(prefixSeq), logBuf: new(bytes.Buffer)}
	e.cache = t.TempDir()
	opt.CacheDir = e.cache
	opt.Logger = slog.New(slog.NewTextHandler(e.logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.b = e.open(t, opt)
	return e
}

func (e *env) open(t *testing.T, opt Options) *Bucket {
	t.Helper()
	b, err := Open(context.Background(), e.srv.URL(testBucket, e.prefix), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// url names an object of the test.
func (e *env) url(key string) string { return "s3://" + testBucket + "/" + e.prefix + "/" + key }

func (e *env) put(t *testing.T, key string, data []byte) *Object {
	t.Helper()
	e.srv.Put(testBucket, e.prefix+"/"+key, data)
	o, err := e.b.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// readAll reads o in pieces of n bytes.
func readAll(t *testing.T, o *Object, n int) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, n)
	for off := int64(0); ; {
		m, err := o.ReadAt(buf, off)
		out = append(out, buf[:m]...)
		off += int64(m)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
}

// TestObjstore runs the tests that can share one server.
func TestObjstore(t *testing.T) {
	srv := s3test.Start(t)
	anonymous(t, srv)
	srv.CreateBucket(testBucket)
	for _, tt := range []struct {
		name string
		f    func(*testing.T, *s3test.Server)
	}{
		{"Anonymous", testAnonymous},
		{"RandomRanges", testRandomRanges},
		{"SecondReadIsFree", testSecondReadIsFree},
		{"DamagedChunk", testDamagedChunk},
		{"Replaced", testReplaced},
		{"Deleted", testDeleted},
		{"CacheBound", testCacheBound},
		{"Prefetch", testPrefetch},
		{"InterleavedReaders", testInterleavedReaders},
		{"BrokenRun", testBrokenRun},
		{"StalledRun", testStalledRun},
		{"CloseLeavesNoGoroutines", testCloseLeavesNoGoroutines},
		{"SharedGet", testSharedGet},
		{"Uncachable", testUncachable},
		{"List", testList},
		{"OpenMissing", testOpenMissing},
		{"ReadOnce", testReadOnce},
		{"WholeObjects", testWholeObjects},
		{"PacedGet", testPacedGet},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, srv) })
	}
}

func testAnonymous(t *testing.T, srv *s3test.Server) {
	e := newEnv(t, srv, Options{})
	if !strings.Contains(e.logBuf.String(), "reading anonymously") {
		t.Errorf("no log line about anonymous access; log:\n%s", e.logBuf)
	}
	o := e.put(t, "x", []byte("hello"))
	if got := readAll(t, o, 3); string(got) != "hello" {
		t.Errorf("read %q, want hello", got)
	}
	if got, want := e.b.String(), "s3://test/"+e.prefix; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func testRandomRanges(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	for _, size := range []int{0, 1, 4097, ChunkSize, ChunkSize + 1, 2*ChunkSize + r.IntN(ChunkSize)} {
		data := randomBytes(r, size)
		o := e.put(t, "obj"+strconv.Itoa(size), data)
		if o.Size() != int64(size) || o.Version() == "" || o.ModTime().IsZero() {
			t.Fatalf("size %d: Size %d, Version %q, ModTime %v", size, o.Size(), o.Version(), o.ModTime())
		}
		for range 20 {
			off := r.Int64N(int64(size) + 2)
			buf := make([]byte, r.IntN(3*ChunkSize/2)+1)
			n, err := o.ReadAt(buf, off)
			want := data[min(off, int64(size)):min(off+int64(len(buf)), int64(size))]
			if n != len(want) || !bytes.Equal(buf[:n], want) {
				t.Fatalf("size %d: ReadAt(%d bytes, %d) = %d, %v; bytes differ or want %d", size, len(buf), off, n, err, len(want))
			}
			if (n < len(buf)) != (err == io.EOF) || (err != nil && err != io.EOF) {
				t.Fatalf("size %d: ReadAt(%d bytes, %d) = %d, %v", size, len(buf), off, n, err)
			}
		}
	}
}

func testSecondReadIsFree(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, 3*ChunkSize+12345)
	o := e.put(t, "obj", data)
	if got := readAll(t, o, 1<<20); !bytes.Equal(got, data) {
		t.Fatal("first read differs")
	}
	e.b.Close() // waits for prefetches
	b2 := e.open(t, Options{CacheDir: e.cache, Logger: quiet})
	o2, err := b2.Open(context.Background(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	before := b2.Stats()
	if got := readAll(t, o2, 1<<20); !bytes.Equal(got, data) {
		t.Fatal("second read differs")
	}
	after := b2.Stats()
	if after.Requests != before.Requests || after.CacheHitBytes != int64(len(data)) {
		t.Errorf("second read: %d requests, %d bytes from cache, want 0 and %d\n%+v", after.Requests-before.Requests, after.CacheHitBytes, len(data), after)
	}
}

// chunkFiles lists the chunk files under dir.
func chunkFiles(t *testing.T, dir string) (files []string, total int64) {
	t.Helper()
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fi, err := d.Info()
			if err == nil {
				files = append(files, path)
				total += fi.Size()
			}
		}
		return nil
	})
	return files, total
}

func testDamagedChunk(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, 3*ChunkSize)
	o := e.put(t, "obj", data)
	readAll(t, o, ChunkSize)
	e.b.Close()
	files, _ := chunkFiles(t, e.cache)
	if len(files) != 3 {
		t.Fatalf("%d chunk files, want 3", len(files))
	}
	// One flipped byte somewhere, one truncated file.
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1-r.IntN(ChunkSize)] ^= 0x40
	if err := os.WriteFile(files[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(files[1], int64(len(b)-100)); err != nil {
		t.Fatal(err)
	}
	b2 := e.open(t, Options{CacheDir: e.cache, Logger: quiet})
	o2, err := b2.Open(context.Background(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, o2, ChunkSize); !bytes.Equal(got, data) {
		t.Fatal("read through damaged chunk files differs")
	}
	if s := b2.Stats(); s.CorruptChunks != 2 || s.BytesFetched != 2*ChunkSize {
		t.Errorf("%d damaged chunks found, %d bytes fetched; want 2 and %d", s.CorruptChunks, s.BytesFetched, 2*ChunkSize)
	}
	// And now they are good again.
	before := b2.Stats().Requests
	if got := readAll(t, o2, ChunkSize); !bytes.Equal(got, data) || b2.Stats().Requests != before {
		t.Error("third read differs or sent requests")
	}
}

func testReplaced(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, 2*ChunkSize)
	o2 := e.put(t, "obj", data)
	buf := make([]byte, 100)
	newData := randomBytes(r, 2*ChunkSize)
	newTag := srv.Put(testBucket, e.prefix+"/obj", newData)
	n, err := o2.ReadAt(buf, ChunkSize+10) // not cached
	if n != 0 || !errors.Is(err, sourcefile.ErrChanged) {
		t.Fatalf("read after replacement: %d, %v; want 0 and ErrChanged", n, err)
	}
	var ce *ChangedError
	if !errors.As(err, &ce) || ce.Now != newTag || !strings.Contains(err.Error(), e.url("obj")) {
		t.Errorf("error %q: want one naming %s and the new ETag %s", err, e.url("obj"), newTag)
	}
	// Every later read fails too, cached or not: the object is not what
	// was opened.
	if n, err := o2.ReadAt(buf, 0); n != 0 || !errors.Is(err, sourcefile.ErrChanged) {
		t.Errorf("later read: %d, %v; want 0 and ErrChanged", n, err)
	}
	t.Logf("error: %v", err)
}

func testDeleted(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	o := e.put(t, "obj", randomBytes(r, 100))
	srv.Delete(testBucket, e.prefix+"/obj")
	buf := make([]byte, 10)
	n, err := o.ReadAt(buf, 0)
	if n != 0 || !errors.Is(err, sourcefile.ErrChanged) || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("read after deletion: %d, %v; want 0 and ErrChanged saying gone", n, err)
	}
	t.Logf("error: %v", err)
}

func testCacheBound(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	limit := int64(3*ChunkSize + ChunkSize/2)
	e := newEnv(t, srv, Options{CacheBytes: limit})
	data := randomBytes(r, 8*ChunkSize)
	o := e.put(t, "obj", data)
	if got := readAll(t, o, 1<<20); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	e.b.Close()
	_, total := chunkFiles(t, e.cache)
	s := e.b.Stats()
	if total > limit || s.CachedBytes > limit || s.Evictions == 0 {
		t.Errorf("chunk files hold %d bytes (Stats: %d, %d evictions), bound %d", total, s.CachedBytes, s.Evictions, limit)
	}
	// A new Bucket with a smaller bound trims what it finds.
	small := int64(ChunkSize + ChunkSize/2)
	b2 := e.open(t, Options{CacheDir: e.cache, CacheBytes: small, Logger: quiet})
	if _, total := chunkFiles(t, e.cache); total > small || b2.Stats().CachedBytes > small {
		t.Errorf("after reopening with bound %d: %d bytes cached", small, total)
	}
}

func testPrefetch(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	const chunks = 12
	data := randomBytes(r, chunks*ChunkSize)
	o := e.put(t, "obj", data)
	buf := make([]byte, 128<<10)
	if _, err := o.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	// The first read was sequential (it starts at 0): chunk 1 comes
	// without the reader asking.
	deadline := time.Now().Add(10 * time.Second)
	for e.b.Stats().Prefetched < ChunkSize && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	before := e.b.Stats()
	if n, err := o.ReadAt(buf, ChunkSize); err != nil || !bytes.Equal(buf[:n], data[ChunkSize:ChunkSize+len(buf)]) {
		t.Fatalf("read of chunk 1: %d, %v", n, err)
	}
	// It starts prefetches of chunks 2 and 3, but does not wait.
	if after := e.b.Stats(); after.ReadWaits != before.ReadWaits || after.CacheHitBytes != before.CacheHitBytes+int64(len(buf)) {
		t.Errorf("reading prefetched chunk 1 waited %d times, hit %d bytes", after.ReadWaits-before.ReadWaits, after.CacheHitBytes-before.CacheHitBytes)
	}
	got := readAll(t, o, 1<<20)
	if !bytes.Equal(got, data) {
		t.Fatal("sequential read differs")
	}
	e.b.Close()
	s := e.b.Stats()
	t.Logf("stats: %+v", s)
	if s.Prefetched < chunks/2*ChunkSize || s.ReadWaits >= chunks || s.CacheHitBytes == 0 {
		t.Errorf("sequential read of %d chunks: %d bytes prefetched, %d waits, %d bytes hit", chunks, s.Prefetched, s.ReadWaits, s.CacheHitBytes)
	}
	// Each chunk is fetched once, most of them in runs of several.
	if s.BytesFetched != chunks*ChunkSize || s.Gets >= chunks {
		t.Errorf("%d GETs for %d bytes, want fewer than %d for %d: each chunk fetched once, in runs", s.Gets, s.BytesFetched, chunks, chunks*ChunkSize)
	}
}

// testBrokenRun has the connection of a run's GET cut in the middle of
// its second chunk: the run is tried again, keeps the chunk it had cached
// instead of caching it twice, and every chunk is right.
func testBrokenRun(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	proxy, cuts := breakOnce(t, srv.Endpoint, ChunkSize+ChunkSize/2, false)
	anonymous(t, &s3test.Server{Endpoint: proxy})
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, RunChunks*ChunkSize)
	o := e.put(t, "obj", data)
	o.prefetch(0, RunChunks-1)
	deadline := time.Now().Add(20 * time.Second)
	for e.b.Stats().Prefetched < int64(len(data)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := readAll(t, o, 1<<20); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	s := e.b.Stats()
	t.Logf("stats: %+v", s)
	if cuts.Load() != 1 || s.Retries != 1 || s.Gets != 2 || s.Prefetched != int64(len(data)) || s.BytesFetched != int64(len(data)) {
		t.Errorf("a run of %d chunks cut %d times: %d retries, %d GETs, %d bytes prefetched, %d fetched; want 1, 1, 2 and %d each",
			RunChunks, cuts.Load(), s.Retries, s.Gets, s.Prefetched, s.BytesFetched, len(data))
	}
}

// testStalledRun has a run's body stop in the middle of its second chunk,
// the connection held open: the GET is cancelled once that chunk has not
// come within the bucket's timeout, tried again, and keeps the chunk it
// had cached.
func testStalledRun(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	proxy, stalls := breakOnce(t, srv.Endpoint, ChunkSize+ChunkSize/2, true)
	anonymous(t, &s3test.Server{Endpoint: proxy})
	e := newEnv(t, srv, Options{})
	const timeout = time.Second
	e.b.getTimeout = timeout
	data := randomBytes(r, RunChunks*ChunkSize)
	o := e.put(t, "obj", data)
	start := time.Now()
	o.prefetch(0, RunChunks-1) // the first answer on the proxy's connection
	// The run claims its chunks in the background: a read sent before
	// it has would fetch the first chunk on its own.
	for e.b.Stats().Prefetched < ChunkSize && time.Since(start) < timeout {
		time.Sleep(time.Millisecond)
	}
	// Read in the background, so that a read the stall holds fails the
	// test instead of hanging it (Close, at cleanup, ends the read).
	got := make([]byte, len(data))
	done := make(chan error, 1)
	go func() {
		for off := 0; off < len(got); off += 1 << 20 {
			if _, err := o.ReadAt(got[off:off+1<<20], int64(off)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(timeout + 15*time.Second):
		t.Fatalf("a read past a stalled body still waits after %v", time.Since(start))
	}
	took := time.Since(start)
	if !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	s := e.b.Stats()
	t.Logf("after %v, stats: %+v", took, s)
	if stalls.Load() != 1 || s.Retries != 1 || s.Gets != 2 || s.BytesFetched != int64(len(data)) {
		t.Errorf("a run of %d chunks stalled %d times: %d retries, %d GETs, %d bytes fetched; want 1, 1, 2 and %d",
			RunChunks, stalls.Load(), s.Retries, s.Gets, s.BytesFetched, len(data))
	}
	if took < timeout || took > timeout+15*time.Second {
		t.Errorf("read past a stalled body took %v; want the timeout, %v, and little more", took, timeout)
	}
}

// breakOnce starts a TCP proxy to the server at endpoint (http://HOST:PORT)
// that passes requests and answers on, except that the first connection to
// carry more than after bytes of answers is broken there: cut (closed) or,
// with stall, held open with nothing more sent until the client hangs up.
// The count runs over the connection, answers and their headers, so a
// test that wants one answer broken has it the first on its connection.
// It returns the proxy's endpoint and the count of answers broken.
func breakOnce(t *testing.T, endpoint string, after int64, stall bool) (string, *atomic.Int64) {
	var broken atomic.Int64
	url := proxy(t, endpoint, func(c, u net.Conn, hungUp <-chan struct{}) {
		buf := make([]byte, 64<<10)
		for sent := int64(0); ; {
			n, err := u.Read(buf)
			if sent+int64(n) > after && broken.CompareAndSwap(0, 1) {
				c.Write(buf[:after-sent])
				if stall {
					<-hungUp
				}
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
				return
			}
			sent += int64(n)
		}
	})
	return url, &broken
}

// throttle starts a TCP proxy to the server at endpoint that sends
// answers on at most rate bytes a second: a slow link. Each piece sent is
// followed by the time it takes at that rate, so time a connection spends
// idle is never made up in a burst.
func throttle(t *testing.T, endpoint string, rate float64) string {
	return proxy(t, endpoint, func(c, u net.Conn, _ <-chan struct{}) {
		buf := make([]byte, 64<<10)
		for {
			n, err := u.Read(buf)
			if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
				return
			}
			time.Sleep(time.Duration(float64(n) / rate * float64(time.Second)))
		}
	})
}

// proxy starts a TCP proxy to the server at endpoint (http://HOST:PORT)
// and returns its endpoint. Requests pass on as they come; answer passes
// each connection's answers from u, the server, to c, the client, and is
// told by hungUp when the client has stopped sending. Cleanup closes it
// and waits for its goroutines.
func proxy(t *testing.T, endpoint string, answer func(c, u net.Conn, hungUp <-chan struct{})) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := strings.TrimPrefix(endpoint, "http://")
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			hungUp := make(chan struct{})
			wg.Go(func() {
				io.Copy(u, c)
				close(hungUp)
				u.Close()
			})
			wg.Go(func() {
				defer c.Close()
				defer u.Close()
				answer(c, u, hungUp)
			})
		}
	})
	return "http://" + l.Addr().String()
}

// testInterleavedReaders has two sequential readers of one object, each
// in its own part of it, taking turns read by read (a view file's reader
// and the codec reading scales farther on): each keeps its read-ahead.
func testInterleavedReaders(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	const chunks, each = 16, 6
	data := randomBytes(r, chunks*ChunkSize)
	o := e.put(t, "obj", data)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < each*ChunkSize; off += int64(len(buf)) {
		for _, at := range []int64{off, chunks/2*ChunkSize + off} {
			if off >= ChunkSize {
				// A prefetch claims its chunk in the background, and a
				// reader that gets there first fetches the chunk itself
				// (Object.prefetch): on a loaded machine one did.
				claimed(o, at/ChunkSize, time.Second)
			}
			if n, err := o.ReadAt(buf, at); err != nil || !bytes.Equal(buf[:n], data[at:at+int64(len(buf))]) {
				t.Fatalf("read at %d: %d, %v", at, n, err)
			}
		}
	}
	e.b.Close()
	s := e.b.Stats()
	t.Logf("stats: %+v", s)
	// Each reader fetches its first chunk itself; the other 2 x 5 come
	// ahead of them (one read taken for the other's random read would
	// have reset the window, and nothing would).
	if s.Prefetched < 2*(each-1)*ChunkSize {
		t.Errorf("two interleaved readers of %d chunks each: %d bytes prefetched, want at least %d", each, s.Prefetched, 2*(each-1)*ChunkSize)
	}
}

// claimed waits, at most timeout, until chunk ci of o is cached or being
// fetched, so that a test's read of it finds the prefetch that read-ahead
// started for it rather than racing it. A chunk no read-ahead asked for
// is read after the timeout, and fetched by the reader.
func claimed(o *Object, ci int64, timeout time.Duration) {
	name := o.chunkName(ci)
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(time.Millisecond) {
		o.b.fetchMu.Lock()
		ok := o.b.fetches[name] != nil || o.b.cache.has(name)
		o.b.fetchMu.Unlock()
		if ok {
			return
		}
	}
}

func testCloseLeavesNoGoroutines(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	data := randomBytes(r, 20*ChunkSize)
	srv.Put(testBucket, "leak/obj", data)
	before := runtime.NumGoroutine()
	b, err := Open(context.Background(), srv.URL(testBucket, "leak"), Options{CacheDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	o, err := b.Open(context.Background(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < 4*ChunkSize; off += int64(len(buf)) {
		if _, err := o.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	// Prefetches are in flight now, and readers read on: Close cancels
	// the GETs of both and waits for the prefetches.
	done := make(chan error, 2)
	for i := range 2 {
		go func() {
			buf := make([]byte, 1<<20)
			for off := int64(4+8*i) * ChunkSize; off < 20*ChunkSize; off += int64(len(buf)) {
				if _, err := o.ReadAt(buf, off); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	b.Close()
	for range 2 {
		select {
		case err := <-done:
			t.Logf("reader ended with %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("a reader still runs 10 s after Close")
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close and the readers' end took %v", took)
	}
	if _, err := o.ReadAt(buf, 19*ChunkSize); err == nil {
		t.Error("read after Close succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		stacks := make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, stacks)
	}
}

// testSharedGet has readers of one chunk that is not cached share one GET.
func testSharedGet(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, ChunkSize/2) // one chunk: nothing to fetch ahead
	o := e.put(t, "obj", data)
	const readers = 8
	errs := make(chan error, readers)
	start := make(chan struct{})
	for i := range readers {
		go func() {
			<-start
			off := int64(i) * 4096
			buf := make([]byte, 1000)
			n, err := o.ReadAt(buf, off)
			if err == nil && !bytes.Equal(buf[:n], data[off:off+1000]) {
				err = errors.New("bytes differ")
			}
			errs <- err
		}()
	}
	close(start)
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := e.b.Stats(); s.Gets != 1 {
		t.Errorf("%d readers of one chunk sent %d GETs, want 1", readers, s.Gets)
	}
}

// testUncachable has chunk files that cannot be written (their
// directories are files): readers get the right bytes by GETs of their
// own, and nothing is cached.
func testUncachable(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	for i := range 256 {
		name := filepath.Join(e.cache, strconv.FormatInt(int64(i)|0x100, 16)[1:])
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := randomBytes(r, 2*ChunkSize+100)
	o := e.put(t, "obj", data)
	if got := readAll(t, o, 1<<20); !bytes.Equal(got, data) {
		t.Fatal("read differs")
	}
	e.b.Close()
	if s := e.b.Stats(); s.CachedBytes != 0 || s.CacheHitBytes != 0 || s.BytesFetched < int64(len(data)) {
		t.Errorf("%d bytes cached, %d hit, %d fetched; want 0, 0 and at least %d", s.CachedBytes, s.CacheHitBytes, s.BytesFetched, len(data))
	}
	if !strings.Contains(e.logBuf.String(), "cannot cache chunk") {
		t.Errorf("no log line about the chunks not cached; log:\n%s", e.logBuf)
	}
}

// TestReadVerified reads every kind of range of a chunk file: whole
// blocks, parts of blocks, the short last block, runs longer than one
// read's buffer, and a damaged block inside the range or just outside it.
func TestReadVerified(t *testing.T) {
	r := rng(t)
	c, err := openCache(t.TempDir(), 1<<30, new(counters), quiet)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20*blockSize + 1234
	data := randomBytes(r, n)
	if err := c.write("x", data, false); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(c.path("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 500 {
		off := r.Int64N(n + 1)
		p := make([]byte, r.Int64N(n-off+1))
		if err := readVerified(f, off, p); err != nil || !bytes.Equal(p, data[off:off+int64(len(p))]) {
			t.Fatalf("read of %d at %d: %v, or bytes differ", len(p), off, err)
		}
	}
	if err := readVerified(f, n-10, make([]byte, 11)); !errors.Is(err, errCorrupt) {
		t.Errorf("read past the end: %v, want errCorrupt", err)
	}
	// Damage block 7: reads touching it fail, reads beside it do not.
	b, err := os.ReadFile(c.path("x"))
	if err != nil {
		t.Fatal(err)
	}
	b[headerLen(n)+7*blockSize+100] ^= 1
	if err := os.WriteFile(c.path("x"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		off, len int64
		bad      bool
	}{
		{0, n, true},
		{7*blockSize + 5000, 1, true},
		{6*blockSize + 1, blockSize, true},
		{0, 7 * blockSize, false},
		{8 * blockSize, n - 8*blockSize, false},
		{7*blockSize - 3, 3, false},
	} {
		err := readVerified(f, tt.off, make([]byte, tt.len))
		if tt.bad != errors.Is(err, errCorrupt) {
			t.Errorf("read of %d at %d of a file damaged in block 7: %v", tt.len, tt.off, err)
		}
	}
}

func testList(t *testing.T, srv *s3test.Server) {
	e := newEnv(t, srv, Options{})
	for _, k := range []string{"p/a.bin", "p/dir/b.bin", "p/.hidden/x", "p/dir/.y", "p/dir/", "pq/no", "other/c", "p/z"} {
		srv.Put(testBucket, e.prefix+"/"+k, []byte(k))
	}
	b := e.b
	b2, err := Open(context.Background(), e.srv.URL(testBucket, e.prefix+"/p/"), Options{CacheDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if got, want := b2.String(), "s3://test/"+e.prefix+"/p"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		b    *Bucket
		want []string
	}{
		{b2, []string{"a.bin", "dir/b.bin", "z"}},
		{b, []string{"other/c", "p/a.bin", "p/dir/b.bin", "p/z", "pq/no"}},
	} {
		fis, err := tt.b.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, fi := range fis {
			got = append(got, fi.Name())
			if fi.Mode() != 0o400 || fi.IsDir() || fi.ModTime().IsZero() {
				t.Errorf("%s: mode %v, dir %v, mtime %v", fi.Name(), fi.Mode(), fi.IsDir(), fi.ModTime())
			}
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%s: List = %q, want %q", tt.b, got, tt.want)
		}
	}
	o, err := b2.Open(context.Background(), "dir/b.bin")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, o, 100); string(got) != "p/dir/b.bin" {
		t.Errorf("read %q", got)
	}
}

func testOpenMissing(t *testing.T, srv *s3test.Server) {
	e := newEnv(t, srv, Options{})
	_, err := e.b.Open(context.Background(), "nothing")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), e.url("nothing")) {
		t.Errorf("Open of a missing object: %v, want ErrNotExist naming it", err)
	}
}

// TestOutage stops the server under an open object, then restarts it.
func TestOutage(t *testing.T) {
	srv := s3test.Start(t)
	anonymous(t, srv)
	srv.CreateBucket(testBucket)
	r := rng(t)
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, 3*ChunkSize)
	o := e.put(t, "obj", data)
	srv.Stop()
	buf := make([]byte, 1000)
	start := time.Now()
	n, err := o.ReadAt(buf, 2*ChunkSize)
	took := time.Since(start)
	t.Logf("read with the server down: %v after %v", err, took)
	if err == nil || n != 0 || took > 15*time.Second || !strings.Contains(err.Error(), e.url("obj")) {
		t.Fatalf("read with the server down: %d, %v after %v; want an error naming the object within 15 s", n, err, took)
	}
	if s := e.b.Stats(); s.Retries != Attempts-1 || s.Errors == 0 {
		t.Errorf("%d retries, %d errors; want %d and some", s.Retries, s.Errors, Attempts-1)
	}
	srv.Restart()
	n, err = o.ReadAt(buf, 2*ChunkSize)
	if err != nil || !bytes.Equal(buf[:n], data[2*ChunkSize:2*ChunkSize+len(buf)]) {
		t.Fatalf("read after restart: %d, %v", n, err)
	}
}

// testReadOnce: bytes read once (a header) cost a GET of just them and
// leave no chunk behind, unless their chunk is cached, which serves them;
// a replaced object fails them as it fails ReadAt.
func testReadOnce(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	data := randomBytes(r, 2*ChunkSize+777)
	o := e.put(t, "shard", data)
	for _, rg := range [][2]int64{{0, 8}, {8, 300_000}, {ChunkSize - 5, 10}, {int64(len(data)) - 3, 3}} {
		before := e.b.Stats()
		p := make([]byte, rg[1])
		if n, err := o.ReadOnceAt(p, rg[0]); n != len(p) || err != nil || !bytes.Equal(p, data[rg[0]:rg[0]+rg[1]]) {
			t.Fatalf("ReadOnceAt(%d bytes at %d) = %d, %v, or other bytes", rg[1], rg[0], n, err)
		}
		after := e.b.Stats()
		if got := after.BytesFetched - before.BytesFetched; got != rg[1] || after.Gets-before.Gets != 1 || after.CachedBytes != 0 {
			t.Errorf("ReadOnceAt(%d bytes at %d) fetched %d bytes in %d GETs and cached %d", rg[1], rg[0], got, after.Gets-before.Gets, after.CachedBytes)
		}
	}
	p := make([]byte, 10)
	if n, err := o.ReadOnceAt(p, int64(len(data))-5); n != 5 || err != io.EOF {
		t.Errorf("ReadOnceAt past the end = %d, %v; want 5, EOF", n, err)
	}
	if _, err := o.ReadAt(make([]byte, 1), 0); err != nil { // caches chunk 0
		t.Fatal(err)
	}
	e.b.Close()
	b2 := e.open(t, Options{CacheDir: e.cache, Logger: quiet, Prefetches: 1})
	o2, err := b2.Open(context.Background(), "shard")
	if err != nil {
		t.Fatal(err)
	}
	before := b2.Stats()
	if n, err := o2.ReadOnceAt(p, 100); n != len(p) || err != nil || !bytes.Equal(p, data[100:110]) {
		t.Fatalf("ReadOnceAt of a cached chunk = %d, %v, or other bytes", n, err)
	}
	if after := b2.Stats(); after.Gets != before.Gets {
		t.Errorf("ReadOnceAt of a cached chunk sent %d GETs", after.Gets-before.Gets)
	}
	o3, err := b2.Open(context.Background(), "shard")
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Put(testBucket, e.prefix+"/shard", randomBytes(r, len(data)+1))
	b2.cache.drop(o3.chunkName(1)) // else its pinned bytes are served
	if _, err := o3.ReadOnceAt(p, ChunkSize+10); !errors.Is(err, sourcefile.ErrChanged) {
		t.Errorf("ReadOnceAt of a replaced object: %v, want ErrChanged", err)
	}
}

// testWholeObjects: Put, Get and Delete, as a shared block cache uses
// them, with Get's limit cutting a longer object.
func testWholeObjects(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	e := newEnv(t, srv, Options{})
	ctx := context.Background()
	for _, size := range []int{0, 1, 70_000} {
		data := randomBytes(r, size)
		name := "ab/entry" + strconv.Itoa(size)
		if err := e.b.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		got, err := e.b.Get(ctx, name, int64(size))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get of %d bytes: %d bytes, %v", size, len(got), err)
		}
		if size > 1 {
			if got, err := e.b.Get(ctx, name, 0); err != nil || len(got) != 1 {
				t.Errorf("Get with limit 0 of %d bytes: %d bytes, %v; want 1", size, len(got), err)
			}
		}
		if err := e.b.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, err := e.b.Get(ctx, name, int64(size)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Get after Delete: %v, want ErrNotExist", err)
		}
	}
	if err := e.b.Delete(ctx, "ab/never"); err != nil {
		t.Errorf("Delete of a missing object: %v", err)
	}
	if st := e.b.Stats(); st.BytesPut != 70_001 {
		t.Errorf("bytes_put %d, want 70001", st.BytesPut)
	}
}

// testPacedGet has Get bring a large object over a slow link, for longer
// than the bucket's timeout, and then one whose body stalls: the first
// comes whole in one GET, as each of its chunks comes within the timeout;
// the second is cancelled once a chunk has not, and comes whole after one
// retry.
func testPacedGet(t *testing.T, srv *s3test.Server) {
	r := rng(t)
	const timeout = 2 * time.Second
	data := randomBytes(r, 3*ChunkSize)
	get := func(e *env) (took time.Duration) {
		t.Helper()
		e.b.getTimeout = timeout
		e.srv.Put(testBucket, e.prefix+"/doc", data)
		start := time.Now()
		got, err := e.b.Get(context.Background(), "doc", int64(len(data)))
		took = time.Since(start)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after %v: %d bytes, %v; want the %d put", took, len(got), err, len(data))
		}
		return took
	}

	// A chunk a second, the object in 3 s: a second to spare for each
	// chunk, on a loaded machine too.
	anonymous(t, &s3test.Server{Endpoint: throttle(t, srv.Endpoint, ChunkSize)})
	e := newEnv(t, srv, Options{})
	took := get(e)
	s := e.b.Stats()
	t.Logf("slow link: after %v, stats: %+v", took, s)
	if took < timeout {
		t.Fatalf("the slow link brought %d bytes in %v, within the timeout: it tests nothing", len(data), took)
	}
	if s.Gets != 1 || s.Retries != 0 {
		t.Errorf("a slow but steady GET: %d GETs, %d retries; want 1 and 0", s.Gets, s.Retries)
	}

	url, stalls := breakOnce(t, srv.Endpoint, ChunkSize+ChunkSize/2, true)
	anonymous(t, &s3test.Server{Endpoint: url})
	e = newEnv(t, srv, Options{})
	took = get(e)
	s = e.b.Stats()
	t.Logf("stalled: after %v, stats: %+v", took, s)
	if stalls.Load() != 1 || s.Gets != 2 || s.Retries != 1 {
		t.Errorf("a GET stalled %d times: %d GETs, %d retries; want 1, 2 and 1", stalls.Load(), s.Gets, s.Retries)
	}
	if took < timeout || took > timeout+15*time.Second {
		t.Errorf("a Get past a stalled body took %v; want the timeout, %v, and little more", took, timeout)
	}
}

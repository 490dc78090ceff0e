package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dsfs/dsfs/sourcefile"
)

// getTimeout is how long a Bucket waits for a GET's answer and for each
// ChunkSize of its body (Bucket.paced): 8 MiB in 60 s is a slow link, and
// a stalled body must not hold a reader forever.
const getTimeout = 60 * time.Second

// Object is one version of an object, pinned by Bucket.Open. It is safe
// for concurrent use.
type Object struct {
	b              *Bucket
	key, url, etag string
	size           int64
	mtime          time.Time
	changed        atomic.Pointer[ChangedError]
	closed         atomic.Bool
	mu             sync.Mutex // guards the read-ahead state below
	streams        []*stream  // the sequential readers followed, at most maxStreams
	reads          uint64     // reads noted so far, the clock of stream.used
}

// maxStreams is how many sequential readers of one Object read-ahead
// follows at once. One object is read by several readers together: a view
// file's reader, and the codec reading, for the blocks it computes ahead
// of that reader, scales that lie farther on. Followed as one, each took
// the other's reads for random ones and reset the window, which then
// seldom grew past a chunk.
const maxStreams = 4

// stream is one sequential reader of an Object, as its reads show it.
type stream struct {
	end    int64  // where its last read ended
	window int64  // read-ahead bytes, 0 until the stream's second read
	ahead  int64  // chunks before this one have been fetched ahead
	used   uint64 // Object.reads at its last read
}

// lastChunk is the chunk holding the last byte s read.
func (s *stream) lastChunk() int64 { return (s.end - 1) / ChunkSize }

// continues reports whether a read at off continues s: it starts where
// s ended, in the chunk s ended in, or in the next one.
func (s *stream) continues(off int64) bool {
	c := s.end / ChunkSize
	return off == s.end || off/ChunkSize == c || off/ChunkSize == c+1
}

// Size returns the pinned size.
func (o *Object) Size() int64 { return o.size }

// Version returns the pinned ETag, quotes included, as the server sent it.
func (o *Object) Version() string { return o.etag }

// ModTime returns the object's LastModified when it was opened.
func (o *Object) ModTime() time.Time { return o.mtime }

// String returns s3://bucket/key.
func (o *Object) String() string { return o.url }

// Close makes later reads fail with fs.ErrClosed. Background fetches it
// started run on, bound to the Bucket.
func (o *Object) Close() error {
	o.closed.Store(true)
	return nil
}

// ReadAt reads the pinned version's bytes at off, from the chunk cache or
// by range GETs. It fails with fs.ErrClosed after Close of the Object or
// its Bucket. If the object was replaced or deleted, it fails with a
// *ChangedError (wrapping sourcefile.ErrChanged) and returns no bytes, now
// and at every later read. At the end of the object it returns io.EOF.
func (o *Object) ReadAt(p []byte, off int64) (int, error) {
	if err := o.readable(off); err != nil {
		return 0, err
	}
	end := min(off+int64(len(p)), o.size)
	o.readAhead(off, end)
	n := 0
	for pos := off; pos < end; {
		ci := pos / ChunkSize
		m := min(end, (ci+1)*ChunkSize) - pos
		if err := o.readChunk(ci, pos-ci*ChunkSize, p[n:n+int(m)]); err != nil {
			if errors.Is(err, sourcefile.ErrChanged) {
				return 0, err
			}
			return n, err
		}
		n += int(m)
		pos += m
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readable is what a read at off checks first: the Object and its Bucket
// open, off not negative, the version not known to be gone, and off
// before the end (else io.EOF).
func (o *Object) readable(off int64) error {
	switch {
	case o.closed.Load() || o.b.ctx.Err() != nil:
		return fmt.Errorf("%s: %w", o.url, fs.ErrClosed)
	case off < 0:
		return fmt.Errorf("%s: read at negative offset %d", o.url, off)
	}
	if ce := o.changed.Load(); ce != nil {
		return ce
	}
	if off >= o.size {
		return io.EOF
	}
	return nil
}

// chunkName names the cache file of chunk ci of this version.
func (o *Object) chunkName(ci int64) string {
	h := sha256.New()
	for _, s := range []string{o.b.bucket, o.key, o.etag, strconv.FormatInt(ci, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readChunk fills p with chunk ci's bytes at off.
func (o *Object) readChunk(ci, off int64, p []byte) error {
	b := o.b
	name := o.chunkName(ci)
	ok, err := b.cache.read(name, off, p)
	if ok {
		b.stats.hit.Add(int64(len(p)))
		return nil
	}
	if err != nil {
		o.damaged(ci, err)
	}
	b.stats.waits.Add(1)
	err = o.load(ci, name)
	if err == nil {
		// Evicted or damaged since, both rare: then a GET of its own.
		if ok, err = b.cache.read(name, off, p); ok {
			b.stats.miss.Add(int64(len(p)))
			return nil
		}
		if err != nil {
			o.damaged(ci, err)
		}
	} else if !errors.Is(err, errNotCached) {
		return err
	}
	data, err := o.get(ci)
	if err != nil {
		return err
	}
	copy(p, data[off:])
	b.stats.miss.Add(int64(len(p)))
	return nil
}

// damaged counts and logs a damaged chunk file, which cache.read has
// deleted.
func (o *Object) damaged(ci int64, err error) {
	o.b.stats.corrupt.Add(1)
	o.b.log.Warn("objstore: damaged chunk file deleted, fetching it again", "object", o.url, "chunk", ci, "err", err)
}

// RunChunks is the most chunks one read-ahead GET fetches. A run of
// chunks costs the server one request instead of one per chunk: SeaweedFS
// spent twice the CPU per byte on 8 MiB range GETs that it spent on
// 128 MiB ones, and a cloud store charges and delays per request. The
// body is cut into the chunks' files as it arrives, and a reader waits
// only for the chunk it needs.
const RunChunks = 4

// fetch is a chunk on its way into the cache: readers of the chunk wait
// for it instead of sending a GET of their own.
type fetch struct {
	name string
	done chan struct{}
	err  error // set before done is closed
}

// load puts chunk ci, named name, in the cache unless it is there, waiting
// for a fetch of it under way instead of sending a second GET. It fails
// with errNotCached (wrapped) when the chunk was fetched but could not be
// cached.
func (o *Object) load(ci int64, name string) error {
	b := o.b
	b.fetchMu.Lock()
	f := b.fetches[name]
	if f == nil {
		// It may have been cached between the caller's miss and now.
		if b.cache.has(name) {
			b.fetchMu.Unlock()
			return nil
		}
		f = b.startFetch(name)
		b.fetchMu.Unlock()
		o.fetchRun(ci, []*fetch{f}, false)
	} else {
		b.fetchMu.Unlock()
	}
	<-f.done
	return f.err
}

// claim starts fetches of the first run of chunks in [from, to] that are
// neither cached nor being fetched, and returns them and the chunk the run
// begins at; no fetch when there is none.
func (o *Object) claim(from, to int64) (first int64, run []*fetch) {
	b := o.b
	b.fetchMu.Lock()
	defer b.fetchMu.Unlock()
	first = from
	for ci := from; ci <= to; ci++ {
		name := o.chunkName(ci)
		if b.fetches[name] != nil || b.cache.has(name) {
			if len(run) > 0 {
				break
			}
			first = ci + 1
			continue
		}
		run = append(run, b.startFetch(name))
	}
	return first, run
}

// fetchRun fetches the chunks of run, chunks first, first+1, ..., with one
// range GET whose body goes straight to their files in small pieces
// (buffering a whole chunk and writing it at once ran at half the speed,
// the buffer being cold by the time it was copied to the file). Each
// fetch is finished once its chunk is cached. prefetch says the run is
// fetched ahead of the readers, for Stats.
func (o *Object) fetchRun(first int64, run []*fetch, prefetch bool) {
	b := o.b
	start := first * ChunkSize
	end := min(start+int64(len(run))*ChunkSize, o.size)
	done := 0 // run[:done] are cached
	err := o.getBody(start, end-start, func(body io.Reader, _ int64) error {
		for i, f := range run {
			n := min(ChunkSize, end-start-int64(i)*ChunkSize)
			if i < done { // cached by an attempt that failed later on
				if _, err := io.CopyN(io.Discard, body, n); err != nil {
					return err
				}
				continue
			}
			if err := b.cache.writeFrom(f.name, body, n, prefetch); err != nil {
				return err
			}
			// Counted once cached, so that a count seen says the
			// chunk is there to read.
			if prefetch {
				b.stats.prefetched.Add(n)
			}
			b.finishFetch(f, nil)
			done = i + 1
		}
		return nil
	})
	if errors.Is(err, errNotCached) {
		b.log.Warn("objstore: cannot cache chunk", "object", o.url, "chunk", first+int64(done), "err", err)
	}
	for _, f := range run[done:] {
		b.finishFetch(f, err)
	}
}

// get fetches chunk ci of the pinned version with a range GET, into
// memory: what a reader falls back on when the chunk cannot be cached.
func (o *Object) get(ci int64) ([]byte, error) {
	start := ci * ChunkSize
	return o.getRange(start, min(ChunkSize, o.size-start))
}

// getRange fetches the n bytes at start of the pinned version into
// memory.
func (o *Object) getRange(start, n int64) ([]byte, error) {
	var data []byte
	err := o.getBody(start, n, func(body io.Reader, n int64) error {
		buf := make([]byte, n)
		if _, err := io.ReadFull(body, buf); err != nil {
			return err
		}
		data = buf
		return nil
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// getBody sends a range GET for the n bytes at start of the pinned
// version, checks that the answer is that version and that range, and
// hands its body to consume, retrying the whole as retry does. An error of
// consume wrapping errNotCached is not retried.
func (o *Object) getBody(start, n int64, consume func(body io.Reader, n int64) error) error {
	b := o.b
	rng := fmt.Sprintf("bytes=%d-%d", start, start+n-1)
	what := "GET " + o.url + " " + rng
	err := b.retry(b.ctx, what, func(ctx context.Context) error {
		b.stats.gets.Add(1)
		ctx, pace, stop := b.paced(ctx)
		defer stop()
		out, err := b.client.GetObject(ctx, &s3.GetObjectInput{
			Bucket: &b.bucket, Key: &o.key, Range: &rng, IfMatch: &o.etag,
		})
		if err != nil {
			if s := statusOf(err); s == http.StatusPreconditionFailed || s == http.StatusNotFound {
				return o.markChanged(ctx)
			}
			return err
		}
		defer out.Body.Close()
		// Servers that ignore If-Match still say which version they send.
		if got := aws.ToString(out.ETag); got != o.etag {
			return o.setChanged(got)
		}
		if l := aws.ToInt64(out.ContentLength); l != n {
			return fmt.Errorf("answer of %d bytes, want %d", l, n)
		}
		if err := consume(pace(out.Body), n); err != nil {
			return err
		}
		b.stats.bytesFetched.Add(n)
		return nil
	})
	if err != nil {
		return wrap(what, err)
	}
	return nil
}

// paced bounds one GET by its pace, not its length: the answer must come
// within getTimeout, and then each ChunkSize bytes of the body that pace
// wraps within getTimeout of the last, or ctx is cancelled. A GET of any
// size gets as long as it needs on a slow link; a stalled one does not
// hold its readers. stop releases the timer and the context.
func (b *Bucket) paced(ctx context.Context) (_ context.Context, pace func(body io.Reader) io.Reader, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	stall := time.AfterFunc(b.getTimeout, cancel)
	pace = func(body io.Reader) io.Reader {
		return &pacedBody{r: body, left: ChunkSize, stall: stall, every: b.getTimeout}
	}
	return ctx, pace, func() {
		stall.Stop()
		cancel()
	}
}

// pacedBody is a response body that puts off its request's stall timer
// each time ChunkSize more bytes have come.
type pacedBody struct {
	r     io.Reader
	left  int64 // bytes before the next ChunkSize boundary
	stall *time.Timer
	every time.Duration
}

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if p.left -= int64(n); p.left <= 0 {
		p.left += ChunkSize
		p.stall.Reset(p.every)
	}
	return n, err
}

// markChanged asks what the object is now, for the error, and records
// the change.
func (o *Object) markChanged(ctx context.Context) error {
	b := o.b
	b.stats.requests.Add(1)
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &o.key})
	switch {
	case err == nil:
		return o.setChanged(aws.ToString(out.ETag))
	case statusOf(err) == http.StatusNotFound:
		return o.setChanged("")
	default:
		return o.setChanged("unknown (" + err.Error() + ")")
	}
}

// setChanged records that the object is now the version now ("" if
// gone); the first record stays.
func (o *Object) setChanged(now string) error {
	o.changed.CompareAndSwap(nil, &ChangedError{URL: o.url, Was: o.etag, Now: now})
	return o.changed.Load()
}

// readAhead notes a read of [off, end) and fetches ahead of the stream it
// continues.
func (o *Object) readAhead(off, end int64) {
	o.mu.Lock()
	o.reads++
	c := (end - 1) / ChunkSize
	s := o.stream(off)
	switch {
	case s == nil:
		s = o.newStream()
	case s.window == 0:
		s.window = ChunkSize
	case c > s.lastChunk():
		s.window = min(2*s.window, o.b.maxWindow)
	}
	s.end, s.used = end, o.reads
	last := (o.size - 1) / ChunkSize
	run := min(RunChunks, max(1, s.window/ChunkSize))
	from := max(c+1, s.ahead)
	to := min((end-1+s.window)/ChunkSize, last)
	// Whole runs, once the window has room for one: a reader in its
	// stride costs one GET per run, not one per chunk.
	if s.window == 0 || from > to || to-from+1 < run && to < last {
		o.mu.Unlock()
		return
	}
	s.ahead = to + 1
	o.mu.Unlock()
	for ci := from; ci <= to; ci += run {
		o.prefetch(ci, min(to, ci+run-1))
	}
}

// stream returns the stream a read at off continues: the one that ended
// exactly at off, else the latest of those it continues, else nil. o.mu
// is held.
func (o *Object) stream(off int64) *stream {
	var found *stream
	for _, s := range o.streams {
		switch {
		case s.end == off:
			return s
		case s.continues(off) && (found == nil || s.used > found.used):
			found = s
		}
	}
	return found
}

// newStream starts a stream, in place of the least recently read one when
// maxStreams are followed already. o.mu is held.
func (o *Object) newStream() *stream {
	if len(o.streams) < maxStreams {
		o.streams = append(o.streams, new(stream))
		return o.streams[len(o.streams)-1]
	}
	old := o.streams[0]
	for _, s := range o.streams[1:] {
		if s.used < old.used {
			old = s
		}
	}
	*old = stream{}
	return old
}

// prefetch fetches the chunks in [from, to] in the background, those
// neither cached nor being fetched, a GET per run of them. It claims them
// only once it may send its GET, so that a reader of one of them never
// waits behind other prefetches but fetches it itself.
func (o *Object) prefetch(from, to int64) {
	b := o.b
	b.goBackground(func() {
		select {
		case b.sem <- struct{}{}:
		case <-b.ctx.Done():
			return
		}
		defer func() { <-b.sem }()
		for ci := from; ci <= to && o.changed.Load() == nil; {
			first, run := o.claim(ci, to)
			if len(run) == 0 {
				return
			}
			o.fetchRun(first, run, true)
			ci = first + int64(len(run))
		}
	})
}

// Object is what the catalog reads a checkpoint file through
// (sourcefile.Object on main); this keeps the two in step.
var _ interface {
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
	Version() string
	ModTime() time.Time
	Close() error
} = (*Object)(nil)

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

// getTimeout bounds one GET attempt of a chunk: 8 MiB in 60 s is a slow
// link, and a stalled body must not hold a reader forever.
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
	lastEnd        int64      // where the last read ended
	lastChunk      int64      // the chunk holding its last byte
	window         int64      // read-ahead bytes, 0 after a random read
	ahead          int64      // chunks before this one have been fetched ahead
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
	err = o.load(ci, name, false)
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

// load puts chunk ci in the cache, unless it is there, sharing one GET
// among its concurrent callers. The GET's body goes straight to the
// chunk file in small pieces: buffering the whole chunk and writing it
// at once ran at half the speed, the 8 MiB buffer being cold by the time
// it was copied to the file. It fails with errNotCached (wrapped) when
// the chunk was fetched but could not be cached. prefetch says the first
// caller fetches ahead of the readers, for Stats.
func (o *Object) load(ci int64, name string, prefetch bool) error {
	b := o.b
	_, err, _ := b.flight.Do(name, func() (any, error) {
		// It may have been cached between the caller's miss and now.
		if b.cache.has(name) {
			return nil, nil
		}
		start := ci * ChunkSize
		err := o.getBody(start, min(ChunkSize, o.size-start), func(body io.Reader, n int64) error {
			return b.cache.writeFrom(name, body, n, prefetch)
		})
		if err != nil {
			if errors.Is(err, errNotCached) {
				b.log.Warn("objstore: cannot cache chunk", "object", o.url, "chunk", ci, "err", err)
			}
			return nil, err
		}
		// Counted once cached, so that a count seen says the chunk is
		// there to read.
		if prefetch {
			b.stats.prefetched.Add(min(ChunkSize, o.size-ci*ChunkSize))
		}
		return nil, nil
	})
	return err
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
		ctx, cancel := context.WithTimeout(ctx, getTimeout)
		defer cancel()
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
		if err := consume(out.Body, n); err != nil {
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

// readAhead notes a read of [off, end) and fetches ahead of a sequential
// reader.
func (o *Object) readAhead(off, end int64) {
	o.mu.Lock()
	c := (end - 1) / ChunkSize
	last := o.lastEnd / ChunkSize
	if off == o.lastEnd || off/ChunkSize == last || off/ChunkSize == last+1 {
		switch {
		case o.window == 0:
			o.window = ChunkSize
		case c > o.lastChunk:
			o.window = min(2*o.window, o.b.maxWindow)
		}
	} else {
		o.window, o.ahead = 0, 0
	}
	o.lastEnd, o.lastChunk = end, c
	from := max(c+1, o.ahead)
	to := min((end-1+o.window)/ChunkSize, (o.size-1)/ChunkSize)
	if o.window == 0 || from > to {
		o.mu.Unlock()
		return
	}
	o.ahead = to + 1
	o.mu.Unlock()
	for ci := from; ci <= to; ci++ {
		o.prefetch(ci)
	}
}

// prefetch fetches chunk ci in the background unless it is cached.
func (o *Object) prefetch(ci int64) {
	b := o.b
	name := o.chunkName(ci)
	if b.cache.has(name) {
		return
	}
	b.goBackground(func() {
		select {
		case b.sem <- struct{}{}:
		case <-b.ctx.Done():
			return
		}
		defer func() { <-b.sem }()
		if b.cache.has(name) || o.changed.Load() != nil {
			return
		}
		if err := o.load(ci, name, true); err != nil && b.ctx.Err() == nil {
			b.log.Debug("objstore: prefetch failed", "object", o.url, "chunk", ci, "err", err)
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

package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dsfs/dsfs/sourcefile"
)

// Sizes: objects are cached in chunks of ChunkSize bytes, and fetched
// ahead of a sequential reader by up to MaxWindow bytes.
const (
	ChunkSize = 8 << 20
	MaxWindow = 128 << 20
)

// Defaults for zero Options fields.
const (
	DefaultCacheBytes = 16 << 30
	DefaultPrefetches = 16
)

// Options configure a Bucket.
type Options struct {
	// CacheDir is the directory of the chunk cache, which Bucket.Open
	// needs; a Bucket without one serves Get, Put and Delete only. Buckets of
	// one process should not share it: each bounds only what it knows.
	CacheDir string
	// CacheBytes bounds the size of the chunk files; 0 means
	// DefaultCacheBytes.
	CacheBytes int64
	// Prefetches bounds the GETs in flight ahead of readers; 0 means
	// DefaultPrefetches. Readers' own GETs are not bounded by it.
	Prefetches int
	// Logger receives the few notable events; nil means slog.Default().
	Logger *slog.Logger
}

// Bucket reads objects under a prefix of an S3 bucket.
type Bucket struct {
	bucket, prefix string
	client         *s3.Client
	transport      *http.Transport
	cache          *cache
	log            *slog.Logger
	stats          counters
	fetchMu        sync.Mutex
	fetches        map[string]*fetch // chunks being fetched, by name
	sem            chan struct{}     // one token per prefetch GET in flight
	maxWindow      int64             // a stream's window at most: MaxWindow, or less for a small cache
	getTimeout     time.Duration     // getTimeout; tests shorten it

	ctx    context.Context // ends at Close, and with it every request
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup // background fetches
}

// Open prepares to read the objects named by url, s3://BUCKET[/PREFIX]:
// it builds the S3 client from the usual AWS configuration (see
// newClient) and indexes the chunk cache. It sends no request to the
// bucket.
func Open(ctx context.Context, url string, opt Options) (*Bucket, error) {
	bucket, prefix, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if opt.CacheBytes <= 0 {
		opt.CacheBytes = DefaultCacheBytes
	}
	if opt.Prefetches <= 0 {
		opt.Prefetches = DefaultPrefetches
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	b := &Bucket{bucket: bucket, prefix: prefix, log: opt.Logger, sem: make(chan struct{}, opt.Prefetches),
		fetches: make(map[string]*fetch), getTimeout: getTimeout}
	// Chunks fetched ahead must not push each other out of the cache
	// before they are read: the windows of an object's maxStreams
	// streams together are a quarter of it at most.
	b.maxWindow = max(ChunkSize, min(MaxWindow, opt.CacheBytes/4/maxStreams/ChunkSize*ChunkSize))
	b.client, b.transport, err = newClient(ctx, url, b.log)
	if err != nil {
		return nil, err
	}
	if opt.CacheDir != "" {
		if b.cache, err = openCache(opt.CacheDir, opt.CacheBytes, &b.stats, b.log); err != nil {
			return nil, fmt.Errorf("%s: %w", url, err)
		}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// String returns the bucket's URL, s3://bucket or s3://bucket/prefix.
func (b *Bucket) String() string {
	if b.prefix == "" {
		return "s3://" + b.bucket
	}
	return "s3://" + b.bucket + "/" + strings.TrimSuffix(b.prefix, "/")
}

// url names an object.
func (b *Bucket) url(key string) string { return "s3://" + b.bucket + "/" + key }

// scope returns a context that ends with ctx or with the Bucket.
func (b *Bucket) scope(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// List returns every object under the prefix, sorted by name: Name is the
// key less the prefix, ModTime the object's LastModified, and Mode and Sys
// those of sourcefile.ObjectInfo (its owner's, who runs dsfs).
// Directory markers (keys ending in "/") and keys with a path component
// starting with "." are left out.
func (b *Bucket) List(ctx context.Context) ([]fs.FileInfo, error) {
	ctx, cancel := b.scope(ctx)
	defer cancel()
	var files []fs.FileInfo
	var token *string
	for {
		var out *s3.ListObjectsV2Output
		what := "LIST " + b.String()
		err := b.retry(ctx, what, func(ctx context.Context) error {
			var err error
			out, err = b.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
				Bucket:            &b.bucket,
				Prefix:            aws.String(b.prefix),
				ContinuationToken: token,
			})
			return err
		})
		if err != nil {
			return nil, wrap(what, err)
		}
		for _, o := range out.Contents {
			name, ok := strings.CutPrefix(aws.ToString(o.Key), b.prefix)
			if !ok || !visible(name) {
				continue
			}
			files = append(files, sourcefile.ObjectInfo(name, aws.ToInt64(o.Size), aws.ToTime(o.LastModified), false))
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			break
		}
		token = out.NextContinuationToken
	}
	slices.SortFunc(files, func(a, b fs.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
	return files, nil
}

// visible reports whether a listed name is a file to show: not a
// directory marker, not empty, no hidden component.
func visible(name string) bool {
	if name == "" || strings.HasSuffix(name, "/") {
		return false
	}
	for c := range strings.SplitSeq(name, "/") {
		if c == "" || strings.HasPrefix(c, ".") {
			return false
		}
	}
	return true
}

// wrap names the request in err, unless err already names the object.
func wrap(what string, err error) error {
	var ce *ChangedError
	if errors.As(err, &ce) || strings.HasPrefix(err.Error(), what) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Open sends a HEAD for the object name (relative to the prefix) and pins
// its ETag, size and modification time: the Object reads that version or
// fails. A missing object gives an error wrapping fs.ErrNotExist.
func (b *Bucket) Open(ctx context.Context, name string) (*Object, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("%s: %w", b.url(b.prefix+name), fs.ErrInvalid)
	}
	if b.cache == nil {
		return nil, fmt.Errorf("%s: opened without a chunk cache (objstore.Options.CacheDir), so its objects cannot be read piecewise", b.url(b.prefix+name))
	}
	key := b.prefix + name
	ctx, cancel := b.scope(ctx)
	defer cancel()
	var out *s3.HeadObjectOutput
	what := "HEAD " + b.url(key)
	err := b.retry(ctx, what, func(ctx context.Context) error {
		var err error
		out, err = b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
		return err
	})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("%s: %w", b.url(key), fs.ErrNotExist)
		}
		return nil, wrap(what, err)
	}
	if out.ETag == nil || out.ContentLength == nil {
		return nil, fmt.Errorf("%s: HEAD answered no ETag or no length", b.url(key))
	}
	return &Object{
		b: b, key: key, url: b.url(key),
		etag: *out.ETag, size: *out.ContentLength, mtime: aws.ToTime(out.LastModified),
		// A read at 0 continues this stream: a reader from the start
		// gets read-ahead from its first read.
		streams: []*stream{{}},
	}, nil
}

// Stats returns the Bucket's counts so far.
func (b *Bucket) Stats() Stats {
	s := &b.stats
	st := Stats{
		Requests:       s.requests.Load(),
		Gets:           s.gets.Load(),
		BytesFetched:   s.bytesFetched.Load(),
		BytesPut:       s.bytesPut.Load(),
		Retries:        s.retries.Load(),
		Errors:         s.errors.Load(),
		CacheHitBytes:  s.hit.Load(),
		CacheMissBytes: s.miss.Load(),
		ReadWaits:      s.waits.Load(),
		Prefetched:     s.prefetched.Load(),
		PrefetchUnused: s.prefetchUnused.Load(),
		CorruptChunks:  s.corrupt.Load(),
		Evictions:      s.evictions.Load(),
	}
	if b.cache != nil {
		st.CachedBytes = b.cache.bytes()
	}
	return st
}

// Close cancels every request of the Bucket, waits for its background
// fetches to end and drops its idle connections. Reads of its Objects
// fail afterwards.
func (b *Bucket) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.transport.CloseIdleConnections()
	return nil
}

// startFetch registers a fetch of the chunk named name; b.fetchMu is
// held.
func (b *Bucket) startFetch(name string) *fetch {
	f := &fetch{name: name, done: make(chan struct{})}
	b.fetches[name] = f
	return f
}

// finishFetch ends f with err and lets its waiters go.
func (b *Bucket) finishFetch(f *fetch, err error) {
	b.fetchMu.Lock()
	delete(b.fetches, f.name)
	b.fetchMu.Unlock()
	f.err = err
	close(f.done)
}

// goBackground runs f in a goroutine that Close waits for, unless the
// Bucket is closed.
func (b *Bucket) goBackground(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

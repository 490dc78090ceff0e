package vfile

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/dsfs/dsfs/blockcache"
)

// Cache is where a Reader gets derived blocks: a *blockcache.Cache, or a
// layer in front of one.
type Cache interface {
	// Get returns block k of n bytes, computing it with compute unless it
	// is cached or being computed already.
	Get(ctx context.Context, k blockcache.Key, n int, compute blockcache.Compute) ([]byte, error)
	// Prefetch computes block k in the background if a worker is free,
	// for as long as ctx (the reader's life) lasts.
	Prefetch(ctx context.Context, k blockcache.Key, n int, compute blockcache.Compute)
}

// ReadAheadBytes is how far past a sequential read derived blocks are
// computed ahead of time.
const ReadAheadBytes = 8 << 20

// Opener opens a File for reading: the mount calls it once per open file
// handle, with a context that ends when the handle is released.
type Opener func(ctx context.Context, f *File) *Reader

// CacheOpener returns an Opener whose Readers get derived blocks from cache.
func CacheOpener(cache Cache) Opener {
	return func(ctx context.Context, f *File) *Reader { return newReader(ctx, f, cache) }
}

// Reader reads a File through a block cache. One Reader serves one open
// file handle: it remembers where the last read ended to spot sequential
// readers and compute the next blocks ahead of them, for as long as the
// handle is open.
type Reader struct {
	f       *File
	cache   Cache
	life    context.Context // ends read-ahead when the handle goes
	lastEnd atomic.Int64
}

// NewReader returns a reader of f whose derived blocks come from cache.
func NewReader(f *File, cache Cache) *Reader {
	return newReader(context.Background(), f, cache)
}

func newReader(life context.Context, f *File, cache Cache) *Reader {
	r := &Reader{f: f, cache: cache, life: life}
	r.lastEnd.Store(-1)
	return r
}

// ReadAt implements io.ReaderAt.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	return r.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext reads like ReadAt; ctx interrupts the wait for derived
// blocks.
func (r *Reader) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	size := r.f.Size()
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), size-off)
	sequential := r.lastEnd.Swap(off+want) == off
	n := int64(0)
	for i := r.f.segment(off); n < want; i++ {
		segOff := off + n - r.f.start(i)
		m := min(want-n, r.f.segs[i].Len()-segOff)
		if err := r.readSegment(ctx, r.f.segs[i], p[n:n+m], segOff); err != nil {
			return int(n), err
		}
		n += m
	}
	if sequential || off == 0 {
		r.readAhead(off + want)
	}
	if want < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

func (r *Reader) readSegment(ctx context.Context, s Segment, p []byte, off int64) error {
	switch s := s.(type) {
	case Bytes:
		copy(p, s[off:])
	case Range:
		n, err := s.R.ReadAt(p, s.Off+off)
		if n < len(p) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	case Unreadable:
		return s.Err
	case Small:
		b := p
		if int64(len(p)) != s.N { // part of it: compute it aside
			b = make([]byte, s.N)
		}
		if err := s.Compute(ctx, b); err != nil {
			return fmt.Errorf("%s: %w", s.ID, err)
		}
		copy(p, b[off:])
	case *Blocks:
		for len(p) > 0 {
			bi := off / s.BlockLen
			b, err := ReadBlock(ctx, r.cache, s, bi, nil)
			if err != nil {
				return err
			}
			c := copy(p, b[off-bi*s.BlockLen:])
			p, off = p[c:], off+int64(c)
		}
	default:
		panic(fmt.Sprintf("vfile: unknown segment type %T", s))
	}
	return nil
}

// ReadBlock returns block i of b: through cache when there is one (the
// returned slice is then shared and must not be modified), else computed
// into buf, which must hold b.BlockLen bytes.
func ReadBlock(ctx context.Context, cache Cache, b *Blocks, i int64, buf []byte) ([]byte, error) {
	n := b.Size(i)
	var p []byte
	var err error
	if cache != nil {
		p, err = cache.Get(ctx, b.key(i), int(n), b.compute(i))
	} else {
		p = buf[:n]
		err = b.Compute(ctx, i, p)
	}
	if err != nil {
		return nil, fmt.Errorf("%s block %d: %w", b.ID, i, err)
	}
	return p, nil
}

func (b *Blocks) key(i int64) blockcache.Key { return blockcache.Key{ID: b.ID, Block: i} }

func (b *Blocks) compute(i int64) blockcache.Compute {
	return func(ctx context.Context, dst []byte) error { return b.Compute(ctx, i, dst) }
}

// readAhead asks the cache to compute the derived blocks in
// [from, from+ReadAheadBytes) that are not cached yet.
func (r *Reader) readAhead(from int64) {
	end := min(from+ReadAheadBytes, r.f.Size())
	for i := r.f.segment(from); i < len(r.f.segs) && r.f.start(i) < end; i++ {
		b, ok := r.f.segs[i].(*Blocks)
		if !ok {
			continue
		}
		lo := max(from, r.f.start(i)) - r.f.start(i)
		hi := min(end, r.f.ends[i]) - r.f.start(i)
		for bi := lo / b.BlockLen; bi*b.BlockLen < hi; bi++ {
			r.cache.Prefetch(r.life, b.key(bi), int(b.Size(bi)), b.compute(bi))
		}
	}
}

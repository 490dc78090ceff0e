package vfile

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/sourcefile"
)

// Cache is where a Reader gets derived blocks: a *blockcache.Cache, or a
// layer in front of one.
type Cache interface {
	// Get returns block k of n bytes, computing it with compute unless it
	// is cached or being computed already.
	Get(ctx context.Context, k blockcache.Key, n int, compute blockcache.Compute) ([]byte, error)
	// Lease is Get for a holder that says when it is done with the bytes
	// (blockcache.Lease.Release).
	Lease(ctx context.Context, k blockcache.Key, n int, compute blockcache.Compute) (blockcache.Lease, error)
	// Consumed says a reader has had block k whole.
	Consumed(k blockcache.Key)
	// Prefetch computes block k in the background if a worker is free,
	// for as long as ctx (the reader's life) lasts.
	Prefetch(ctx context.Context, k blockcache.Key, n int, compute blockcache.Compute)
	// Budget is the most bytes of blocks the cache keeps.
	Budget() int64
}

// ReadAheadBytes is how far past a sequential read derived blocks are
// computed ahead of time.
//
// A reader that has read ReadAheadBytes in one sequential run streams the
// file: for it, the next StreamAheadBytes of derived bytes are computed
// too, however far past verbatim bytes they lie, so that the cores a
// splice of verbatim bytes leaves idle compute what comes after them. A
// reader of a header alone never gets that far.
const ReadAheadBytes = 8 << 20

// StreamAheadBytes is the most derived bytes computed ahead of a streaming
// reader; it is at most a 32nd of the cache's budget, so that 32 such
// readers find what was computed for them still cached.
const StreamAheadBytes = 32 << 20

// Opener opens a File for reading: the mount calls it once per open file
// handle, with a context that ends when the handle is released.
type Opener func(ctx context.Context, f *File) *Reader

// CacheOpener returns an Opener whose Readers get derived blocks from cache.
func CacheOpener(cache Cache) Opener {
	return func(ctx context.Context, f *File) *Reader { return newReader(ctx, f, cache) }
}

// PageCacheOpener is CacheOpener for a mount whose files' pages the
// kernel keeps once read (FOPEN_KEEP_CACHE) and that reads nothing again
// on its own: a Cheap block a Reader's sequential run has had whole is
// told to the cache as consumed (Cache.Consumed), as the kernel answers
// any later read of its bytes, so its memory is the first reused rather
// than held twice. A Cheap block two files share (an Engram table of
// engram-fp4/ and of nvfp4+engram-fp4/) is then computed again for the
// second file unless that is read soon after the first.
func PageCacheOpener(cache Cache) Opener {
	return func(ctx context.Context, f *File) *Reader {
		r := newReader(ctx, f, cache)
		r.consumes = true
		return r
	}
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
	// runStart is where the current sequential run of reads began.
	runStart atomic.Int64
	// consumes says blocks a run has had whole are consumed
	// (PageCacheOpener).
	consumes bool
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
	pieces, n, err := r.ReadPieces(ctx, p, off)
	defer Release(pieces)
	pos := 0
	for _, pc := range pieces {
		if perr := pc.Fill(p[pos : pos+pc.N]); perr != nil {
			return pos, perr
		}
		pos += pc.N
	}
	return n, err
}

// LocalFile is implemented by the reader of a Range whose bytes are those
// of a local file (a *sourcefile.File, a *checkpoint.Shard or a
// *checkpoint.Tensor): a read of the Range may then leave the bytes in the
// file, for the kernel to copy from it (ReadPieces), instead of reading
// them into memory.
type LocalFile interface {
	// LocalFile returns the file and the offset in it of the reader's
	// byte 0, or nil when its bytes are in no local file after all (an
	// object of a bucket).
	LocalFile() (*sourcefile.File, int64)
}

// Piece is one run of a read's answer, in order: bytes in memory, or N
// bytes of a local source file at Off, not read yet (File set).
type Piece struct {
	// Bytes are the piece's bytes when File is nil: the read's own buffer
	// (Buffered), or a cached block or a literal segment, shared and never
	// modified.
	Bytes []byte
	File  *sourcefile.File
	Off   int64
	N     int
	// Buffered says Bytes lie in the read's buffer, at their place in the
	// read: they need no copy into it, and whoever answers from the buffer
	// must copy them before it is used again.
	Buffered bool
	// lease holds Bytes when they are a cached block's.
	lease blockcache.Lease
}

// Release lets the cache reuse the memory of the cached blocks that
// pieces answer from: it is called once, after their Bytes were last read
// (for a FUSE reply, once the kernel has copied them). Until then the
// blocks' bytes stay theirs.
func Release(pieces []Piece) {
	for i := range pieces {
		pieces[i].lease.Release()
		pieces[i].lease = blockcache.Lease{}
	}
}

// Fill puts the piece's bytes in p (len N), the piece's place in the
// read's buffer, unless they are there already: what a reader that does
// not leave pieces in their files (a copied reply) does with each. A file
// that ends early gives an error wrapping io.ErrUnexpectedEOF, naming it.
func (pc Piece) Fill(p []byte) error {
	switch {
	case pc.Buffered:
		return nil
	case pc.File == nil:
		copy(p, pc.Bytes)
		return nil
	}
	n, err := pc.File.ReadAt(p, pc.Off)
	if n < len(p) {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%s at %d: %w", pc.File.Path(), pc.Off+int64(n), io.ErrUnexpectedEOF)
		}
		return err
	}
	return nil
}

// Sharing thresholds. A cached block or literal segment of at least
// minShared bytes of a read is answered from where it lies; shorter ones
// are copied into the read's buffer and answered together with their
// neighbours, so that a read is a few pieces however many tiny segments
// (weight_scale_2 scalars, small tensors) it crosses. A run of a local
// file of at least minLocal bytes is left in the file; a shorter one is
// read into the buffer, which costs less than handing the kernel a page.
const (
	minShared = 16 << 10
	minLocal  = 16 << 10
)

// ReadPieces answers a read of len(p) bytes at off as pieces, in order,
// whose lengths add up to n, the bytes read. p is the read's buffer: bytes
// that must be copied or computed are put in it, at their place in the
// read, and pieces of p answer them; cached blocks and literal segments
// of minShared bytes or more are answered where they lie, and runs of a
// LocalFile Range of minLocal bytes or more are left in the file. Read
// ReadAtContext's way (every piece filled into p), the bytes are
// ReadAtContext's. The error is ReadAtContext's: io.EOF past the end, or
// why the piece after the last returned could not be read. The caller
// gives the pieces back with Release once it has answered with them,
// error or not.
func (r *Reader) ReadPieces(ctx context.Context, p []byte, off int64) ([]Piece, int, error) {
	size := r.f.Size()
	if off < 0 {
		return nil, 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= size {
		return nil, 0, io.EOF
	}
	want := min(int64(len(p)), size-off)
	sequential := r.lastEnd.Swap(off+want) == off
	if !sequential {
		r.runStart.Store(off)
	}
	a := assembler{p: p}
	for i := r.f.segment(off); a.n < want; i++ {
		start := r.f.start(i)
		segOff := off + a.n - start
		m := min(want-a.n, r.f.segs[i].Len()-segOff)
		if err := r.readSegment(ctx, &a, r.f.segs[i], start, m, segOff); err != nil {
			return a.pieces, int(a.n), err
		}
	}
	if r.cache != nil && (sequential || off == 0) {
		var stream int64
		if off+want-r.runStart.Load() >= ReadAheadBytes {
			stream = min(StreamAheadBytes, r.cache.Budget()/32)
		}
		r.readAhead(off+want, stream)
	}
	if want < int64(len(p)) {
		return a.pieces, int(a.n), io.EOF
	}
	return a.pieces, int(a.n), nil
}

// assembler builds a read's pieces; n is the bytes answered so far.
type assembler struct {
	p      []byte
	n      int64
	pieces []Piece
}

// buf returns the read's buffer for the next m bytes.
func (a *assembler) buf(m int64) []byte { return a.p[a.n : a.n+m] }

// inBuf answers the next m bytes from the read's buffer, where the caller
// has put them; they join the last piece when it is the buffer's bytes
// just before (a Buffered piece ends where the answer does, pieces being
// in order).
func (a *assembler) inBuf(m int64) {
	if k := len(a.pieces) - 1; k >= 0 && a.pieces[k].Buffered {
		last := &a.pieces[k]
		last.Bytes = a.p[a.n-int64(last.N) : a.n+m]
		last.N += int(m)
		a.n += m
		return
	}
	a.pieces = append(a.pieces, Piece{Bytes: a.p[a.n : a.n+m], N: int(m), Buffered: true})
	a.n += m
}

// shared answers the next len(b) bytes with b, held by l (or nothing),
// or with a copy in the read's buffer when b is short.
func (a *assembler) shared(b []byte, l blockcache.Lease) {
	if len(b) < minShared {
		copy(a.buf(int64(len(b))), b)
		l.Release()
		a.inBuf(int64(len(b)))
		return
	}
	a.pieces = append(a.pieces, Piece{Bytes: b, N: len(b), lease: l})
	a.n += int64(len(b))
}

// local answers the next m bytes with the file's bytes at off.
func (a *assembler) local(f *sourcefile.File, off, m int64) {
	if k := len(a.pieces) - 1; k >= 0 {
		if last := &a.pieces[k]; last.File == f && last.Off+int64(last.N) == off {
			last.N += int(m)
			a.n += m
			return
		}
	}
	a.pieces = append(a.pieces, Piece{File: f, Off: off, N: int(m)})
	a.n += m
}

// readSegment answers the next m bytes of the read from segment s, which
// starts at byte start of the file, from its byte off.
func (r *Reader) readSegment(ctx context.Context, a *assembler, s Segment, start, m, off int64) error {
	switch s := s.(type) {
	case Bytes:
		a.shared(s[off:off+m], blockcache.Lease{})
	case Range:
		if lf, ok := s.R.(LocalFile); ok && m >= minLocal {
			if f, base := lf.LocalFile(); f != nil {
				a.local(f, base+s.Off+off, m)
				return nil
			}
		}
		n, err := s.R.ReadAt(a.buf(m), s.Off+off)
		if int64(n) < m {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		a.inBuf(m)
	case Unreadable:
		return s.Err
	case Small:
		b := a.buf(m)
		if m != s.N { // part of it: compute it aside
			b = make([]byte, s.N)
		}
		if err := s.Compute(ctx, b); err != nil {
			return fmt.Errorf("%s: %w", s.ID, err)
		}
		if m != s.N {
			copy(a.buf(m), b[off:])
		}
		a.inBuf(m)
	case *Blocks:
		for end := off + m; off < end; {
			bi := off / s.BlockLen
			b, l, err := r.block(ctx, s, bi)
			if err != nil {
				return err
			}
			lo := off - bi*s.BlockLen
			hi := min(int64(len(b)), end-bi*s.BlockLen)
			a.shared(b[lo:hi], l)
			// Had whole: the run began at or before the block's first
			// byte, and this read has its last.
			if r.consumes && s.Cheap && hi == int64(len(b)) && start+bi*s.BlockLen >= r.runStart.Load() {
				r.cache.Consumed(s.key(bi))
			}
			off += hi - lo
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

// block returns block i of b for the read's pieces: leased from the
// cache, or, without one, computed into memory of its own (the zero
// Lease).
func (r *Reader) block(ctx context.Context, b *Blocks, i int64) ([]byte, blockcache.Lease, error) {
	if r.cache == nil {
		p, err := ReadBlock(ctx, nil, b, i, make([]byte, b.Size(i)))
		return p, blockcache.Lease{}, err
	}
	l, err := r.cache.Lease(ctx, b.key(i), int(b.Size(i)), b.compute(i))
	if err != nil {
		return nil, l, fmt.Errorf("%s block %d: %w", b.ID, i, err)
	}
	return l.Bytes(), l, nil
}

func (b *Blocks) key(i int64) blockcache.Key { return blockcache.Key{ID: b.ID, Block: i} }

func (b *Blocks) compute(i int64) blockcache.Compute {
	return func(ctx context.Context, dst []byte) error { return b.Compute(ctx, i, dst) }
}

// readAhead asks the cache to compute the derived blocks in
// [from, from+ReadAheadBytes) that are not cached yet, and those of the
// next stream derived bytes after that.
func (r *Reader) readAhead(from, stream int64) {
	end := min(from+ReadAheadBytes, r.f.Size())
	for i := r.f.segment(from); i < len(r.f.segs); i++ {
		start := r.f.start(i)
		if start >= end && stream <= 0 {
			return
		}
		b, ok := r.f.segs[i].(*Blocks)
		if !ok {
			continue
		}
		for bi := (max(from, start) - start) / b.BlockLen; bi*b.BlockLen < b.N; bi++ {
			if start+bi*b.BlockLen >= end {
				if stream <= 0 {
					break
				}
				stream -= b.Size(bi)
			}
			r.cache.Prefetch(r.life, b.key(bi), int(b.Size(bi)), b.compute(bi))
		}
	}
}

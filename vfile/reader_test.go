package vfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/sourcefile"
)

// derived is a Blocks segment whose byte i is f(i), computed per block.
func derived(id string, n, blockLen int64) *Blocks {
	return &Blocks{ID: id, N: n, BlockLen: blockLen, Compute: func(_ context.Context, i int64, dst []byte) error {
		for j := range dst {
			dst[j] = byte((i*blockLen + int64(j)) * 7)
		}
		return nil
	}}
}

func TestReaderMatchesConcatenation(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	src := make([]byte, 5000)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	blocks := derived("d", 3001, 256)
	f := NewFile(Bytes("header--"), Range{R: bytes.NewReader(src), Off: 100, N: 1234}, Bytes{}, blocks, Bytes("tail"))
	var want []byte
	want = append(want, "header--"...)
	want = append(want, src[100:1334]...)
	for i := range int64(3001) {
		want = append(want, byte(i*7))
	}
	want = append(want, "tail"...)
	if f.Size() != int64(len(want)) {
		t.Fatalf("Size = %d, want %d", f.Size(), len(want))
	}
	cache := blockcache.New(4096, 2)
	defer cache.Close()
	r := NewReader(f, cache)
	for range 2000 {
		off := rng.Int64N(int64(len(want)) + 10)
		p := make([]byte, rng.IntN(3000))
		n, err := r.ReadAt(p, off)
		end := min(off+int64(len(p)), int64(len(want)))
		if off >= int64(len(want)) {
			if n != 0 || err != io.EOF {
				t.Fatalf("seed %d: ReadAt past end at %d = %d, %v", seed, off, n, err)
			}
			continue
		}
		if !bytes.Equal(p[:n], want[off:end]) {
			t.Fatalf("seed %d: ReadAt(%d, len %d) differs", seed, off, len(p))
		}
		if short := end-off < int64(len(p)); short != (err == io.EOF) || (err != nil && err != io.EOF) {
			t.Fatalf("seed %d: ReadAt(%d, len %d) = %d, %v", seed, off, len(p), n, err)
		}
	}
}

func TestReaderReportsSegmentErrors(t *testing.T) {
	bad := errors.New("source changed")
	f := NewFile(Bytes("ok"), &Blocks{ID: "bad", N: 10, BlockLen: 10,
		Compute: func(context.Context, int64, []byte) error { return bad }})
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	if _, err := NewReader(f, cache).ReadAt(make([]byte, 12), 0); !errors.Is(err, bad) {
		t.Fatalf("ReadAt = %v, want %v", err, bad)
	}
	short := NewFile(Range{R: bytes.NewReader([]byte("abc")), N: 10})
	if _, err := NewReader(short, cache).ReadAt(make([]byte, 10), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadAt of a truncated source = %v, want ErrUnexpectedEOF", err)
	}
}

func TestReadAheadFollowsSequentialReaders(t *testing.T) {
	blocks := derived("ra", 64<<20, 1<<20)
	f := NewFile(blocks)
	cache := blockcache.New(128<<20, 4)
	defer cache.Close()
	r := NewReader(f, cache)
	p := make([]byte, 1<<20)
	for off := int64(0); off < 4<<20; off += 1 << 20 {
		if _, err := r.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
	}
	if s := cache.Stats(); s.ReadAhead == 0 {
		t.Fatalf("no read-ahead for a sequential reader: %+v", s)
	}
}

// askedCache is a Cache that records which blocks read-ahead asks for and
// computes them only when read.
type askedCache struct {
	*blockcache.Cache
	budget int64
	asked  map[blockcache.Key]bool
}

func (c *askedCache) Prefetch(_ context.Context, k blockcache.Key, _ int, _ blockcache.Compute) {
	c.asked[k] = true
}

func (c *askedCache) Budget() int64 { return c.budget }

// TestStreamingReadAhead: a reader that has read ReadAheadBytes in one
// run has the derived blocks after a long verbatim run computed ahead, up
// to StreamAheadBytes and a 32nd of the cache's budget; a reader of the
// first bytes alone, or one that jumped, only has the blocks within
// ReadAheadBytes of its reads computed ahead.
func TestStreamingReadAhead(t *testing.T) {
	const mb = 1 << 20
	far := derived("far", 64*mb, mb) // after 40 MB of verbatim bytes
	f := NewFile(Bytes(make([]byte, 40*mb)), far)
	for _, tt := range []struct {
		name   string
		budget int64
		reads  [][2]int64 // offset, length in MB
		want   int64      // blocks of far asked for
	}{
		{"header only", 1 << 30, [][2]int64{{0, 1}, {1, 1}}, 0},
		{"streaming", 1 << 30, [][2]int64{{0, 4}, {4, 4}, {8, 1}}, StreamAheadBytes / mb},
		{"streaming, small budget", 64 * mb, [][2]int64{{0, 4}, {4, 4}, {8, 1}}, 2},
		{"a jump starts a new run", 1 << 30, [][2]int64{{0, 4}, {20, 4}, {24, 1}}, 0},
		{"near the blocks", 1 << 30, [][2]int64{{30, 1}, {31, 2}, {33, 1}}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &askedCache{Cache: blockcache.New(tt.budget, 1), budget: tt.budget, asked: map[blockcache.Key]bool{}}
			defer c.Close()
			r := NewReader(f, c)
			for _, rd := range tt.reads {
				if _, err := r.ReadAt(make([]byte, rd[1]*mb), rd[0]*mb); err != nil {
					t.Fatal(err)
				}
			}
			if got := int64(len(c.asked)); got != tt.want {
				t.Errorf("%d blocks asked for, want %d: %v", got, tt.want, c.asked)
			}
			for i := range tt.want {
				if !c.asked[far.key(i)] {
					t.Errorf("block %d not asked for: %v", i, c.asked)
				}
			}
		})
	}
}

// TestReaderWithoutCache: a reader without a cache, for a file made of
// literal bytes (cmd/dsfs's readNode), streams it whole and asks nothing
// ahead.
func TestReaderWithoutCache(t *testing.T) {
	const mb = 1 << 20
	want := make([]byte, 12*mb)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got, err := io.ReadAll(io.NewSectionReader(NewReader(NewFile(Bytes(want)), nil), 0, int64(len(want))))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read differs")
	}
}

func TestSmallSegmentsNeedNoCache(t *testing.T) {
	var segs []Segment
	var want []byte
	for i := range 100 {
		v := byte(i)
		segs = append(segs, Small{ID: fmt.Sprint("s", i), N: 4, Compute: func(_ context.Context, dst []byte) error {
			copy(dst, []byte{v, v, v, v})
			return nil
		}})
		want = append(want, v, v, v, v)
	}
	bad := errors.New("group unreadable")
	segs = append(segs, Small{ID: "bad", N: 4, Compute: func(context.Context, []byte) error { return bad }})
	f := NewFile(segs...)
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	r := NewReader(f, cache)
	got := make([]byte, len(want))
	for off := 0; off < len(want); off += 3 { // reads that split scalars
		if _, err := r.ReadAt(got[off:min(off+3, len(want))], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	if s := cache.Stats(); s.Misses != 0 || s.ReadAhead != 0 {
		t.Fatalf("scalars went through the cache: %+v", s)
	}
	if _, err := r.ReadAt(make([]byte, 4), int64(len(want))); !errors.Is(err, bad) || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("failing scalar: %v", err)
	}
}

// countingReader counts the reads of a source.
type countingReader struct {
	r     io.ReaderAt
	reads int
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.r.ReadAt(p, off)
}

// sliceReader is a source that is not a pointer: comparing two of them
// would panic.
type sliceReader []byte

func (s sliceReader) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(s).ReadAt(p, off)
}

// TestAdjacentRangesAreOneSourceRead: Ranges that continue each other in
// one source are read with one source read; any other boundary (another
// source, a gap, a non-Range between) still splits the reads.
func TestAdjacentRangesAreOneSourceRead(t *testing.T) {
	src := make([]byte, 400)
	for i := range src {
		src[i] = byte(i * 13)
	}
	a, b := &countingReader{r: bytes.NewReader(src)}, &countingReader{r: bytes.NewReader(src)}
	s := sliceReader(src)
	spans := []struct {
		r       io.ReaderAt
		off, n  int64
		literal string
	}{
		{r: a, off: 0, n: 10}, {r: a, off: 10, n: 20}, {r: a, off: 30, n: 1}, {r: a, off: 31, n: 69}, // one read
		{literal: "x"},
		{r: a, off: 100, n: 50}, {r: a, off: 150, n: 50}, // one read
		{r: b, off: 200, n: 50},                           // another source
		{r: a, off: 300, n: 100}, {r: a, off: 250, n: 50}, // not contiguous
		{r: s, off: 0, n: 10}, {r: s, off: 10, n: 10}, // not comparable: two reads
	}
	var segs []Segment
	var want []byte
	for _, sp := range spans {
		if sp.r == nil {
			segs = append(segs, Bytes(sp.literal))
			want = append(want, sp.literal...)
			continue
		}
		segs = append(segs, Range{R: sp.r, Off: sp.off, N: sp.n})
		want = append(want, src[sp.off:sp.off+sp.n]...)
	}
	f := NewFile(segs...)
	r := NewReader(f, nil)
	got := make([]byte, len(want))
	if n, err := r.ReadAt(got, 0); n != len(want) || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAt of the whole file: %d, %v, equal %v", n, err, bytes.Equal(got, want))
	}
	if a.reads != 4 || b.reads != 1 {
		t.Fatalf("one read of the file read source a %d times, b %d times; want 4 and 1", a.reads, b.reads)
	}
	if len(f.Segments()) != 8 {
		t.Fatalf("%d segments, want 8", len(f.Segments()))
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	for range 1000 {
		off := rng.Int64N(int64(len(want)))
		p := make([]byte, rng.Int64N(int64(len(want))-off)+1)
		if n, err := r.ReadAt(p, off); n != len(p) || (err != nil && err != io.EOF) || !bytes.Equal(p, want[off:off+int64(n)]) {
			t.Fatalf("seed %d: ReadAt(%d, len %d) = %d, %v, or differs", seed, off, len(p), n, err)
		}
	}
}

// TestReadPiecesLeavesLocalBytesInTheirFile: a read's pieces leave long
// runs of a local file in the file, answer long cached blocks from the
// cache and copy the rest into the read's buffer (Buffered, at their
// place), and filled in they are ReadAt's bytes.
func TestReadPiecesLeavesLocalBytesInTheirFile(t *testing.T) {
	src := make([]byte, 200<<10)
	for i := range src {
		src[i] = byte(i * 13)
	}
	p := filepath.Join(t.TempDir(), "shard")
	if err := os.WriteFile(p, src, 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := sourcefile.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	f := NewFile(Bytes("head"), Range{R: sf, Off: 1000, N: 100 << 10}, derived("d", 64<<10, 32<<10),
		Range{R: sf, Off: 150 << 10, N: 100}, Bytes("tail"))
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	r := NewReader(f, cache)
	buf := make([]byte, f.Size())
	pieces, n, err := r.ReadPieces(context.Background(), buf, 0)
	if err != nil || int64(n) != f.Size() {
		t.Fatalf("ReadPieces = %d, %v", n, err)
	}
	type kind struct {
		file, buffered bool
		n              int
	}
	var got []kind
	pos := 0
	for _, pc := range pieces {
		got = append(got, kind{pc.File != nil, pc.Buffered, pc.N})
		if pc.Buffered && &pc.Bytes[0] != &buf[pos] {
			t.Errorf("buffered piece at %d is not at its place in the buffer", pos)
		}
		pos += pc.N
	}
	want := []kind{{false, true, 4}, {true, false, 100 << 10}, {false, false, 32 << 10}, {false, false, 32 << 10}, {false, true, 104}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pieces %v, want %v", got, want)
	}
	filled := make([]byte, f.Size())
	if _, err := r.ReadAt(filled, 0); err != nil {
		t.Fatal(err)
	}
	pos = 0
	for _, pc := range pieces {
		b := pc.Bytes
		if pc.File != nil {
			b = src[pc.Off : pc.Off+int64(pc.N)]
		}
		if !bytes.Equal(b, filled[pos:pos+pc.N]) {
			t.Fatalf("piece at %d differs from ReadAt's bytes", pos)
		}
		pos += pc.N
	}
}

// TestPageCacheReadersConsume: a PageCacheOpener's reader says which
// Cheap blocks its sequential runs had whole, and their memory is reused
// for the blocks after them, while the pieces of a read not yet released
// (a reply not yet sent) keep their bytes; a CacheOpener's reader, one
// whose reads jump, and one of blocks not Cheap consume nothing, and every
// block stays cached.
func TestPageCacheReadersConsume(t *testing.T) {
	const blockLen, nBlocks = 64 << 10, 40
	for _, tt := range []struct {
		name    string
		open    func(Cache) Opener
		step    int64 // read 48 KiB every step bytes
		cheap   bool
		reused  bool
		allKept bool
	}{
		{"page cache, sequential", PageCacheOpener, 48 << 10, true, true, false},
		{"plain, sequential", CacheOpener, 48 << 10, true, false, true},
		{"page cache, jumping", PageCacheOpener, 96 << 10, true, false, true},
		{"page cache, sequential, costly", PageCacheOpener, 48 << 10, false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			blocks := derived("c", nBlocks*blockLen, blockLen)
			blocks.Cheap = tt.cheap
			f := NewFile(Bytes(bytes.Repeat([]byte("h"), 100)), blocks, Bytes("tail"))
			want := make([]byte, f.Size())
			if _, err := NewReader(f, nil).ReadAt(want, 0); err != nil {
				t.Fatal(err)
			}
			cache := blockcache.New(1<<30, 1)
			defer cache.Close()
			r := tt.open(cache)(context.Background(), f)
			var last []Piece // the previous read's, released after the next read
			var lastOff int64
			check := func(pieces []Piece, off int64) {
				t.Helper()
				pos := off
				for _, pc := range pieces {
					if !pc.Buffered && pc.File == nil && !bytes.Equal(pc.Bytes, want[pos:pos+int64(pc.N)]) {
						t.Fatalf("the piece at %d changed before it was released", pos)
					}
					pos += int64(pc.N)
				}
			}
			for off := int64(0); off < f.Size(); off += tt.step {
				p := make([]byte, 48<<10)
				pieces, n, err := r.ReadPieces(context.Background(), p, off)
				if err != nil && err != io.EOF {
					t.Fatal(err)
				}
				got := make([]byte, 0, n)
				for _, pc := range pieces {
					got = append(got, pc.Bytes...)
				}
				if !bytes.Equal(got, want[off:off+int64(n)]) {
					t.Fatalf("read at %d differs", off)
				}
				check(last, lastOff)
				Release(last)
				last, lastOff = pieces, off
			}
			Release(last)
			s := cache.Stats()
			if reused := s.Reused > 0; reused != tt.reused {
				t.Fatalf("%d blocks computed into reused buffers, want reuse %v", s.Reused, tt.reused)
			}
			if kept := cache.Progress([]string{"c"}).Resident == nBlocks; kept != tt.allKept {
				t.Fatalf("%+v: every block cached %v, want %v", cache.Progress([]string{"c"}), kept, tt.allKept)
			}
		})
	}
}

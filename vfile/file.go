package vfile

import (
	"context"
	"io"
	"reflect"
	"sort"

	"github.com/dsfs/dsfs/sourcefile"
)

// Segment is one contiguous piece of a virtual file.
type Segment interface {
	Len() int64
}

// Bytes is literal content (headers, small generated tensors).
type Bytes []byte

// Len implements Segment.
func (b Bytes) Len() int64 { return int64(len(b)) }

// Range is a byte range of a source file served unchanged.
type Range struct {
	R   io.ReaderAt // a *checkpoint.Shard or a source file
	Off int64
	N   int64
}

// Len implements Segment.
func (r Range) Len() int64 { return r.N }

// Unreadable is a run of bytes that must not be served: every read of it
// fails with Err. It stands for a bad source shard in the derived views, so
// that a loader fails loudly, naming the shard, instead of loading a
// checkpoint with the shard left out.
type Unreadable struct {
	N   int64
	Err error
}

// Len implements Segment.
func (u Unreadable) Len() int64 { return u.N }

// Blocks is derived data computed in blocks of BlockLen bytes (the last may
// be shorter). Compute fills dst with block i; it must be a pure function of
// the source bytes so a block can be cached and recomputed at will.
type Blocks struct {
	ID       string // names the transform and tensor; equal IDs share blocks
	N        int64
	BlockLen int64
	Compute  func(ctx context.Context, i int64, dst []byte) error
	// Cheap says a block costs less to compute again than to keep once
	// the kernel's page cache holds its bytes: a transcode of source
	// bytes at memory speed, not a quantisation or a forward. A
	// PageCacheOpener's Reader lets the cache reuse its memory once it had
	// it whole.
	Cheap bool
}

// Len implements Segment.
func (b *Blocks) Len() int64 { return b.N }

// Count is the number of blocks.
func (b *Blocks) Count() int64 { return (b.N + b.BlockLen - 1) / b.BlockLen }

// Size is the length of block i.
func (b *Blocks) Size(i int64) int64 { return min(b.BlockLen, b.N-i*b.BlockLen) }

// Small is derived bytes computed on every read, with no cache flight:
// for values whose computation is a lookup of something memoised already,
// such as NVFP4's weight_scale_2 (2^g of a group's global exponent), of
// which a checkpoint has thousands, or a shard header written from its
// layout, which must not wait behind read-ahead in the block cache and is
// cheaper to write again than to keep for every shard. Compute must be a
// pure function of the source bytes, like a block's. ID names it as a
// Blocks' ID does.
type Small struct {
	ID      string
	N       int64
	Compute func(ctx context.Context, dst []byte) error
}

// Len implements Segment.
func (s Small) Len() int64 { return s.N }

// File is a virtual file of known size.
type File struct {
	segs []Segment
	ends []int64 // ends[i] is the file offset just past segs[i]
	// Source is set when the file is a source file served unchanged, so the
	// mount may let the kernel read it directly.
	Source string
	// Origin is the source file opened at mount: the mount hands the kernel
	// a descriptor only once Origin has checked that the path still names
	// that file, unchanged.
	Origin *sourcefile.File
}

// NewFile concatenates segments into a file.
func NewFile(segs ...Segment) *File {
	f := &File{segs: make([]Segment, 0, len(segs)), ends: make([]int64, 0, len(segs))}
	for _, s := range segs {
		f.Append(s)
	}
	return f
}

// Append adds a segment at the end of the file. Empty segments are dropped,
// and a Range that continues the last segment, a Range of the same source,
// extends it: a read spanning many small source tensors laid out in the
// source's order is then one source read, one pread and one check of the
// source file, instead of one per tensor.
func (f *File) Append(s Segment) {
	if s.Len() == 0 {
		return
	}
	if r, ok := s.(Range); ok && len(f.segs) > 0 {
		if last, ok := f.segs[len(f.segs)-1].(Range); ok && last.Off+last.N == r.Off && sameSource(last.R, r.R) {
			f.segs[len(f.segs)-1] = Range{R: last.R, Off: last.Off, N: last.N + r.N}
			f.ends[len(f.ends)-1] += r.N
			return
		}
	}
	f.segs = append(f.segs, s)
	f.ends = append(f.ends, f.Size()+s.Len())
}

// sameSource reports whether a and b are the same source. Only pointers
// are compared: comparing interfaces holding other types may panic.
func sameSource(a, b io.ReaderAt) bool {
	t := reflect.TypeOf(a)
	return t != nil && t.Kind() == reflect.Pointer && t == reflect.TypeOf(b) && a == b
}

// Size is the file's length in bytes.
func (f *File) Size() int64 {
	if len(f.ends) == 0 {
		return 0
	}
	return f.ends[len(f.ends)-1]
}

// Segments returns the file's segments in order; the slice is shared and
// must not be modified.
func (f *File) Segments() []Segment { return f.segs }

// segment returns the index of the segment holding offset off.
func (f *File) segment(off int64) int {
	return sort.Search(len(f.ends), func(i int) bool { return f.ends[i] > off })
}

func (f *File) start(i int) int64 {
	if i == 0 {
		return 0
	}
	return f.ends[i-1]
}

package vfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/splice"
)

// TestRepliesHoldTheirBlocksUntilSent: a reply, written (a vector) or
// spliced (a pipe that refers to the block's pages), holds the cached
// block it answers from until go-fuse calls Done, after the kernel has
// copied it: a block computed before then never reuses the buffer, even
// though its reader consumed it, and one computed after does.
func TestRepliesHoldTheirBlocksUntilSent(t *testing.T) {
	const blockLen = 64 << 10
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, bytes.Repeat([]byte("s"), 32<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := sourcefile.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	pattern := func(_ context.Context, _ int64, dst []byte) error {
		for i := range dst {
			dst[i] = byte(i * 7)
		}
		return nil
	}
	for _, tc := range []struct {
		name    string
		splice  bool
		segment []vfile.Segment // before the block
	}{
		{"written", false, nil},
		{"spliced", true, []vfile.Segment{vfile.Range{R: sf, N: 32 << 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.splice && !splice.Resizable() {
				t.Skip("no resizable pipes here")
			}
			cache := blockcache.New(1<<30, 1)
			defer cache.Close()
			f := vfile.NewFile(append(tc.segment, &vfile.Blocks{ID: "r", N: blockLen, BlockLen: blockLen, Compute: pattern, Cheap: true})...)
			want := make([]byte, f.Size())
			if _, err := vfile.NewReader(f, nil).ReadAt(want, 0); err != nil {
				t.Fatal(err)
			}
			h := &fileHandle{m: &Mount{splice: tc.splice}, r: vfile.PageCacheOpener(cache)(context.Background(), f)}
			dest := make([]byte, f.Size())
			pieces, n, err := h.r.ReadPieces(context.Background(), dest, 0)
			if err != nil {
				t.Fatal(err)
			}
			res, err := h.answer(pieces, n, dest)
			if err != nil {
				t.Fatal(err)
			}
			if _, isPipe := res.(*pipeReply); isPipe != tc.splice {
				t.Fatalf("the reply is a %T", res)
			}
			other := func(id string) {
				t.Helper()
				l, err := cache.Lease(context.Background(), blockcache.Key{ID: id}, blockLen, func(_ context.Context, dst []byte) error {
					for i := range dst {
						dst[i] = 0xff
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				l.Release()
			}
			other("before")
			if s := cache.Stats(); s.Reused != 0 {
				t.Fatalf("a block computed while the reply was unsent reused its buffer: %+v", s)
			}
			got, status := res.Bytes(make([]byte, 0, n))
			if !status.Ok() || !bytes.Equal(got, want) {
				t.Fatalf("the reply's bytes are not the file's (status %v)", status)
			}
			res.Done()
			other("after")
			if s := cache.Stats(); s.Reused != 1 {
				t.Fatalf("the sent reply's block was not reused: %+v", s)
			}
		})
	}
}

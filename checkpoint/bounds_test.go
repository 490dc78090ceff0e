package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
	"golang.org/x/sync/semaphore"
)

// TestBoundShards: the shards past the total bounds are left out, each
// with one problem naming it and the limit; the ones before are kept.
func TestBoundShards(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for i := range 4 {
		name := fmt.Sprintf("model-%05d-of-00004.safetensors", i+1)
		writeShard(t, dir, name, spec(fmt.Sprintf("a%d", i), safetensors.U8, 1), spec(fmt.Sprintf("b%d", i), safetensors.U8, 1))
		names = append(names, name)
	}
	rs, err := sourceRoots(dir)
	c := &Catalog{Dir: dir, roots: rs}
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		maxTensors int
		maxBytes   int64
		kept       int
		reason     string
	}{
		{8, 1 << 20, 4, ""},
		{5, 1 << 20, 2, "more than the 5 tensors or 1048576 header bytes a mount allows (4 tensors, "},
		{1, 1 << 20, 0, "with its 2 tensors"},
		{100, 300, 2, "or 300 header bytes"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.maxTensors, tt.maxBytes), func(t *testing.T) {
			shards := make([]*Shard, len(names))
			for i, n := range names {
				if shards[i], err = c.openShard(n, semaphore.NewWeighted(maxParsing)); err != nil {
					t.Fatal(err)
				}
			}
			errs := make([]error, len(names))
			boundShards(shards, errs, tt.maxTensors, tt.maxBytes)
			for i, s := range shards {
				if (s != nil) != (i < tt.kept) {
					t.Errorf("shard %d kept: %v, want the first %d", i, s != nil, tt.kept)
				}
				if s != nil {
					s.Close()
				}
			}
			for i, err := range errs {
				if (err != nil) != (i >= tt.kept) || (err != nil && !strings.Contains(err.Error(), tt.reason)) {
					t.Errorf("shard %d (%s): %v, want an error with %q past the first %d", i, names[i], err, tt.reason, tt.kept)
				}
			}
		})
	}
}

// TestJSONFileBounds: a config.json or index past its bound (here sparse
// files of 8 GiB) is one problem, refused by its size without reading it.
func TestJSONFileBounds(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{ConfigName, "config.json: unreadable: 8589934592 bytes, larger than the 16777216-byte limit"},
		{IndexName, IndexName + ": unreadable: 8589934592 bytes, larger than the 67108864-byte limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeIndex(t, dir, goodCheckpoint(t, dir))
			if err := os.Truncate(filepath.Join(dir, tt.name), 8<<30); err != nil {
				t.Fatal(err)
			}
			c := mustOpen(t, dir)
			var got []string
			for _, p := range c.Problems {
				got = append(got, p.String())
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("problems %q, want %q", got, tt.want)
			}
		})
	}
}

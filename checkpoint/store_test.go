package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dsfs/dsfs/sourcefile"
)

// memStore is a Store of the files of a directory as they were when it
// was made: each object is the file's bytes, its version their digest.
type memStore struct {
	name  string
	files map[string][]byte
	mtime time.Time
}

func newMemStore(t *testing.T, dir string) *memStore {
	t.Helper()
	s := &memStore{name: "mem://bucket/ckpt", files: make(map[string][]byte), mtime: time.Unix(1_700_000_000, 0)}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		s.files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *memStore) String() string { return s.name }

func (s *memStore) List(context.Context) ([]fs.FileInfo, error) {
	var out []fs.FileInfo
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range s.files {
			if !yield(n) {
				return
			}
		}
	}) {
		out = append(out, sourcefile.ObjectInfo(name, int64(len(s.files[name])), s.mtime, false))
	}
	return out, nil
}

func (s *memStore) Open(_ context.Context, name string) (sourcefile.Object, error) {
	b, ok := s.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: s.name + "/" + name, Err: fs.ErrNotExist}
	}
	return &memObject{Reader: bytes.NewReader(b), version: fmt.Sprintf("%x", sha256.Sum256(b)), mtime: s.mtime}, nil
}

type memObject struct {
	*bytes.Reader
	version string
	mtime   time.Time
}

func (o *memObject) Version() string    { return o.version }
func (o *memObject) ModTime() time.Time { return o.mtime }
func (o *memObject) Close() error       { return nil }

// TestOpenStore checks that a checkpoint catalogs the same from a store as
// from its directory: the same tensors, files, problems and bytes, named
// under the store, with no local file behind them.
func TestOpenStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"good", func(t *testing.T, dir string) { writeIndex(t, dir, goodCheckpoint(t, dir)) }},
		{"missing shard and a hidden file", func(t *testing.T, dir string) {
			wm := goodCheckpoint(t, dir)
			wm["x"] = shard3
			writeIndex(t, dir, wm)
			writeFile(t, dir, ".cache/huggingface/note", "skipped")
			writeFile(t, dir, "README.md", "# ckpt")
		}},
		{"no index", func(t *testing.T, dir string) { goodCheckpoint(t, dir) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			local := mustOpen(t, dir)
			st := newMemStore(t, dir)
			remote, err := OpenStore(context.Background(), st)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { remote.Close() })
			if !remote.Remote() || local.Remote() {
				t.Fatalf("Remote: %v (store), %v (directory)", remote.Remote(), local.Remote())
			}
			if !reflect.DeepEqual(remote.Problems, local.Problems) {
				t.Errorf("problems from the store %v, from the directory %v", remote.Problems, local.Problems)
			}
			if got, want := names(remote.Files), names(local.Files); !slices.Equal(got, want) {
				t.Errorf("files from the store %v, from the directory %v", got, want)
			}
			if len(remote.Tensors) != len(local.Tensors) {
				t.Fatalf("%d tensors from the store, %d from the directory", len(remote.Tensors), len(local.Tensors))
			}
			for i, rt := range remote.Tensors {
				lt := local.Tensors[i]
				if rt.Name != lt.Name || rt.Role != lt.Role || rt.Format != lt.Format || rt.Offset != lt.Offset || rt.Shard.Name != lt.Shard.Name {
					t.Errorf("tensor %d: %+v from the store, %+v from the directory", i, rt, lt)
				}
				if want := st.name + "/" + rt.Shard.Name; rt.Shard.Path != want {
					t.Errorf("shard path %q, want %q", rt.Shard.Path, want)
				}
				got, want := make([]byte, rt.Size), make([]byte, lt.Size)
				if _, err := rt.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := lt.ReadAt(want, 0); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("tensor %s: bytes differ", rt.Name)
				}
				if f, _ := rt.LocalFile(); f != nil {
					t.Errorf("tensor %s of a store has a local file", rt.Name)
				}
			}
			for _, f := range remote.Files {
				fi, err := remote.Stat(f.Path)
				if err != nil || fi.Size() != f.Size || !fi.Mode().IsRegular() {
					t.Errorf("Stat(%s) = %v, %v", f.Path, fi, err)
				}
				sf, err := remote.OpenFile(f.Path)
				if err != nil {
					t.Fatal(err)
				}
				if stamp, _ := sf.Stamp(); stamp.Version == "" || !stamp.Proven(time.Time{}) {
					t.Errorf("%s: stamp %+v has no proving version", f.Path, stamp)
				}
				sf.Close()
			}
			if fi, err := remote.Stat(remote.Dir); err != nil || !fi.IsDir() {
				t.Errorf("Stat(Dir) = %v, %v", fi, err)
			}
			if _, err := remote.OpenFile(remote.Dir + "/no-such-file"); err == nil {
				t.Error("OpenFile of a file the catalog does not have succeeded")
			}
		})
	}
}

func names(fs []File) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

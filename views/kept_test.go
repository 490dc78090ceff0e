package views

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/internal/tinyckpt"
	"github.com/dsfs/dsfs/vfile"
)

// waitIdle waits until no file waits to be kept or checked.
func (k *KeptFiles) waitIdle() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(k.pending) > 0 {
		k.ran.Wait()
	}
}

func keeper(t *testing.T, s *Set, dir string) (*KeptFiles, *diskcache.Cache) {
	t.Helper()
	disk, err := diskcache.Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, cache := tinySet(t)
	k, err := s.KeepFiles("dsfs test", disk, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k, disk
}

// firstComputed is the first file of dir with derived blocks (one that
// is not a source file's bytes and header alone).
func firstComputed(dir *vfile.Node) *vfile.Node {
	for _, c := range dir.Children {
		if c.File != nil && keepable(c.File) && hasBlocks(c.File) {
			return c
		}
	}
	return nil
}

func hasBlocks(f *vfile.File) bool {
	for _, s := range f.Segments() {
		if _, ok := s.(*vfile.Blocks); ok {
			return true
		}
	}
	return false
}

func readKept(t *testing.T, f *os.File) []byte {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKeptFiles: a view file read whole is kept, and handed out with
// its bytes; a later process hands it out once it has checked it; source
// files and literal ones are never kept; another setting names other
// files.
func TestKeptFiles(t *testing.T) {
	// A later process names kept files as an earlier one did only when the
	// source's stamps prove its bytes (Identity).
	tinyckpt.Settle(t, tinyDir)
	s, cache := tinySet(t)
	dir := t.TempDir()
	k, disk := keeper(t, s, dir)

	shard := firstComputed(s.Root.Child("nvfp4"))
	if shard == nil {
		t.Fatal("v41-tiny's nvfp4/ has no computed file")
	}
	for _, p := range []string{"source/" + shard.Name, "nvfp4/config.json"} {
		n := s.Root
		for _, name := range strings.Split(p, "/") {
			n = n.Child(name)
		}
		if _, ok := k.files[n.File]; ok {
			t.Errorf("%s may be kept: only computed files are", p)
		}
	}
	if f := k.Open(shard.File); f != nil {
		f.Close()
		t.Fatal("a file was handed out before it was kept")
	}
	k.ReadWhole(shard.File)
	k.waitIdle()
	f := k.Open(shard.File)
	if f == nil {
		t.Fatalf("not kept after a whole read: %+v, disk %+v", k.Stats(), disk.Stats())
	}
	want := readAll(t, shard, cache)
	if got := readKept(t, f); !bytes.Equal(got, want) {
		t.Fatal("the kept file differs from the view's bytes")
	}

	// A later process finds the file and checks it from the start.
	k2, disk2 := keeper(t, s, dir)
	k2.waitIdle()
	f = k2.Open(shard.File)
	if f == nil {
		t.Fatalf("not handed out once checked: %+v, disk %+v", k2.Stats(), disk2.Stats())
	}
	if got := readKept(t, f); !bytes.Equal(got, want) {
		t.Fatal("the checked kept file differs from the view's bytes")
	}
	if st := disk2.Stats(); st.KeptVerified != 1 || st.KeptWritten != 0 {
		t.Errorf("later process: %+v, want one file checked and none written", st)
	}

	// A damaged copy found by a whole read is removed and written again.
	kept, _ := filepath.Glob(filepath.Join(dir, "*", "*.file"))
	if len(kept) != 1 {
		t.Fatalf("kept files %v, want one", kept)
	}
	b, _ := os.ReadFile(kept[0])
	b[0] ^= 1
	if err := os.WriteFile(kept[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	k2.run(&keptJob{f: shard.File, verify: true, rewrite: true})
	if f := k2.Open(shard.File); f == nil {
		t.Fatalf("a damaged copy was not written again: %+v", disk2.Stats())
	} else if got := readKept(t, f); !bytes.Equal(got, want) {
		t.Fatal("the copy written again differs from the view's bytes")
	}
	if st := disk2.Stats(); st.Corrupt != 1 || st.KeptWritten != 1 {
		t.Errorf("after a damaged copy: %+v, want it found corrupt and written again", st)
	}

	// Another setting: the same path names another file.
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	mtp, err := Build(cat, Options{Values: map[string]string{"nvfp4-mtp": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mtp.Close()
	k3, _ := keeper(t, mtp, dir)
	other := mtp.Root.Child("nvfp4").Child(shard.Name).File
	if k3.files[other].key == k.files[shard.File].key {
		t.Error("--nvfp4-mtp names the same kept file as the default")
	}
	if f := k3.Open(other); f != nil {
		f.Close()
		t.Error("a file kept under other settings was handed out")
	}
}

// TestKeptFilesNeedALocalDirectory: a bucket alone cannot keep files.
func TestKeptFilesNeedALocalDirectory(t *testing.T) {
	s, cache := tinySet(t)
	if _, err := s.KeepFiles("dsfs test", nil, cache, nil); err == nil {
		t.Error("KeepFiles without a disk cache succeeded")
	}
}

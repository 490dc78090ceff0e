package integration

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/tinyckpt"
)

// keptStats is the part of .dsfs/stats.json about kept files.
type keptStats struct {
	replyStats
	Disk struct {
		Written  int64 `json:"kept_files_written"`
		Verified int64 `json:"kept_files_verified"`
		Opens    int64 `json:"kept_file_opens"`
		Corrupt  int64 `json:"corrupt"`
	} `json:"disk_cache"`
	Kept struct {
		Files   int   `json:"files"`
		Pending int   `json:"pending"`
		Failed  int64 `json:"failed"`
	} `json:"kept_files"`
}

func (m *mount) kept(t *testing.T) keptStats {
	t.Helper()
	var s keptStats
	catJSON(t, m.path(".dsfs", "stats.json"), &s)
	return s
}

// waitKept waits until the mount's stats satisfy done.
func (m *mount) waitKept(t *testing.T, what string, done func(keptStats) bool) keptStats {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		s := m.kept(t)
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s: %+v\n%s", what, s, m.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeptViewFiles mounts with --cache-files: an nvfp4/ shard read whole
// is kept in the cache directory, and the next open of it is passed
// through to the kept copy, serving no byte through dsfs; an open while
// another is served by dsfs is served by dsfs too (the kernel refuses to
// mix the two); a later mount checks the copy before passing it through,
// and one whose copy was damaged removes it, serves the view's bytes and
// keeps them again.
// Every read gives `dsfs export`'s bytes.
func TestKeptViewFiles(t *testing.T) {
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(tinySrc)); err != nil {
		t.Fatal(err)
	}
	// Kept files outlive a mount only for a source whose stamps prove its
	// bytes (views.Identity).
	tinyckpt.Settle(t, src)
	exported := export(t, "nvfp4", src)
	name := convertedShard(t, src, exported)
	want, err := os.ReadFile(filepath.Join(exported, name))
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	args := []string{"--views", "nvfp4", "--cache-dir", cacheDir, "--cache-files"}

	m := startMount(t, src, args...)
	if off := m.replies(t).PassthroughOff; off != "" {
		t.Skipf("FUSE passthrough is off here: %s", off)
	}
	p := m.path("nvfp4", name)
	held, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(held); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("first read of nvfp4/%s: %v, or its bytes differ from the export's", name, err)
	}
	m.waitKept(t, "kept file", func(s keptStats) bool { return s.Disk.Written == 1 })
	// held is open and served by dsfs: another open must be too.
	before := m.kept(t)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of nvfp4/%s while another open is served by dsfs: %v, or its bytes differ", name, err)
	}
	if s := m.kept(t); s.Passthrough != before.Passthrough {
		t.Errorf("an open was passed through while another was served by dsfs: %+v", s)
	}
	held.Close()
	before = m.kept(t)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of kept nvfp4/%s: %v, or its bytes differ from the export's", name, err)
	}
	if s := m.kept(t); s.Passthrough != before.Passthrough+1 || s.Bytes != before.Bytes || s.Disk.Opens != before.Disk.Opens+1 {
		t.Errorf("stats.json %+v after %+v: want the kept file passed through, no byte served by dsfs", s, before)
	}
	m.stop(t)

	// A later mount checks the kept copy before passing it through.
	m = startMount(t, src, args...)
	if got, err := os.ReadFile(m.path("nvfp4", name)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("later mount, first read: %v, or the bytes differ", err)
	}
	m.waitKept(t, "checked kept file", func(s keptStats) bool { return s.Disk.Verified == 1 })
	before = m.kept(t)
	if got, err := os.ReadFile(m.path("nvfp4", name)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("later mount, kept read: %v, or the bytes differ", err)
	}
	if s := m.kept(t); s.Passthrough != before.Passthrough+1 || s.Bytes != before.Bytes {
		t.Errorf("later mount: %+v after %+v: want the checked file passed through", s, before)
	}
	m.stop(t)

	// A damaged copy is found, removed and never served.
	kept, _ := filepath.Glob(filepath.Join(cacheDir, "*", "*.file"))
	if len(kept) != 1 {
		t.Fatalf("cache directory holds kept files %v, want one", kept)
	}
	b, err := os.ReadFile(kept[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(kept[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	m = startMount(t, src, args...)
	if got, err := os.ReadFile(m.path("nvfp4", name)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("mount with a damaged kept file: %v, or the bytes differ from the export's", err)
	}
	// The check at mount removes the damaged copy; the whole read keeps
	// the file again, and the next open is passed through to the new copy.
	m.waitKept(t, "damaged file removed and the file kept again", func(s keptStats) bool { return s.Disk.Corrupt == 1 && s.Disk.Written == 1 })
	if got, err := os.ReadFile(m.path("nvfp4", name)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of the file kept again: %v, or the bytes differ from the export's", err)
	}
	if lines := m.log.linesWith("corrupt entry removed"); len(lines) != 1 || !strings.Contains(lines[0], kept[0]) {
		t.Errorf("log lines about the damaged file: %q", lines)
	}
	if b, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(b, want) {
		t.Errorf("the file kept again: %v, or it differs from the export's", err)
	}
}

// convertedShard names a shard whose nvfp4/ file differs from the source's
// (experts converted).
func convertedShard(t *testing.T, src, exported string) string {
	t.Helper()
	shards, _ := filepath.Glob(filepath.Join(src, "*.safetensors"))
	for _, s := range shards {
		a, err1 := os.Stat(s)
		b, err2 := os.Stat(filepath.Join(exported, filepath.Base(s)))
		if err1 == nil && err2 == nil && a.Size() != b.Size() {
			return filepath.Base(s)
		}
	}
	t.Fatal("no nvfp4/ shard differs from its source")
	return ""
}

// TestCacheFilesNeedsALocalDirectory: --cache-files alone is refused
// before anything is mounted.
func TestCacheFilesNeedsALocalDirectory(t *testing.T) {
	out, err := exec.Command(dsfsBin, "mount", "--cache-files", tinySrc, t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--cache-files needs a local cache directory") {
		t.Errorf("dsfs mount --cache-files without --cache-dir: %v\n%s", err, out)
	}
}

// TestKeptFileNotPassedThroughOnceItsSourceChanged: a kept copy holds the
// checkpoint as it was when kept; once a source shard has changed, an open
// of a view file is served by dsfs, whose reads fail as every read of a
// changed source does, instead of passed through to the copy.
func TestKeptFileNotPassedThroughOnceItsSourceChanged(t *testing.T) {
	src := copyTiny(t)
	m := startMount(t, src, "--views", "nvfp4", "--cache-dir", t.TempDir(), "--cache-files")
	if off := m.replies(t).PassthroughOff; off != "" {
		t.Skipf("FUSE passthrough is off here: %s", off)
	}
	p := m.path("nvfp4", goodShard)
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m.waitKept(t, "kept file", func(s keptStats) bool { return s.Disk.Written == 1 })
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of the kept file: %v, or its bytes differ", err)
	}
	before := m.kept(t)
	if before.Passthrough != 1 {
		t.Fatalf("the kept file was not passed through: %+v", before)
	}
	flipByte(t, filepath.Join(src, goodShard))
	f := openDirect(t, p)
	if got, err := f.readAt(0, 128<<10); !errors.Is(err, syscall.EIO) {
		t.Errorf("read of %d bytes after the source changed: %v; want EIO", len(got), err)
	}
	if s := m.kept(t); s.Passthrough != before.Passthrough {
		t.Errorf("an open after the source changed was passed through to the kept copy: %+v", s)
	}
}

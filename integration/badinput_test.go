package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dsfs/dsfs/internal/badinput"
	"github.com/dsfs/dsfs/synth"
)

const (
	goodShard = badinput.GoodShard
	badShard  = badinput.BadShard
)

// copyTiny copies the shared v41-tiny checkpoint into a fresh directory.
func copyTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run(t, "cp", "-a", tinySrc+"/.", dir)
	return dir
}

// rewriteHeader rewrites a shard's header JSON with edit and keeps its data.
func rewriteHeader(t *testing.T, path string, edit func(h map[string]map[string]any)) {
	t.Helper()
	err := badinput.RewriteHeader(path, func(h map[string]map[string]any) error { edit(h); return nil })
	if err != nil {
		t.Fatal(err)
	}
}

func patchBytes(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	if err := badinput.PatchBytes(path, off, b); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput plants each bad input of FORMATS.md (internal/badinput) in
// a copy of v41-tiny and checks that the mount logs exactly one line
// naming the file and the reason and keeps serving the good shards. A bad
// shard is never hidden: a loader of a derived view fails on it with EIO
// (or ENOENT when it is missing), and source/ serves it as it is.
func TestBadInput(t *testing.T) {
	needMount(t)
	for _, tt := range badinput.Cases() {
		t.Run(tt.Name, func(t *testing.T) {
			src := copyTiny(t)
			if err := tt.Plant(src); err != nil {
				t.Fatal(err)
			}
			m := startMount(t, src)
			lines := m.log.linesWith("bad input")
			if len(lines) != 1 || !strings.Contains(lines[0], tt.File) || !strings.Contains(lines[0], tt.Reason) {
				t.Fatalf("want one line naming %s and %q, got:\n%s", tt.File, tt.Reason, strings.Join(lines, "\n"))
			}
			// The good parts are served.
			good, err := os.ReadFile(m.path("nvfp4", goodShard))
			if err != nil || len(good) == 0 {
				t.Fatalf("reading a good shard: %v", err)
			}
			run(t, "cat", m.path("nvfp4", "model.safetensors.index.json"))
			run(t, "cmp", m.path("source", "config.json"), filepath.Join(src, "config.json"))
			run(t, "python3", "-c", "import json,sys; json.load(open(sys.argv[1]))", m.path("nvfp4", "config.json"))
			if !tt.Bad {
				return
			}
			_, statErr := os.Stat(filepath.Join(src, badShard))
			for _, view := range []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4", "q2"} {
				shard, err := loadCheckpoint(m.path(view))
				want := syscall.EIO
				if errors.Is(statErr, os.ErrNotExist) {
					want = syscall.ENOENT
				}
				if !errors.Is(err, want) || !strings.Contains(shard, strings.TrimPrefix(badShard, "model-")) {
					t.Errorf("loading %s/ failed at %q with %v, want %v at the bad shard", view, shard, err, want)
				}
			}
			if statErr == nil {
				out, err := exec.Command("cat", m.path("nvfp4", badShard)).CombinedOutput()
				if err == nil || !strings.Contains(string(out), "Input/output error") {
					t.Errorf("cat nvfp4/%s: %v, %.100q", badShard, err, out)
				}
				run(t, "cmp", m.path("source", badShard), filepath.Join(src, badShard))
				if !strings.Contains(m.log.String(), "source shard "+badShard+" is bad") {
					t.Errorf("no log line names the bad shard read:\n%s", m.log)
				}
			}
		})
	}
}

// loadCheckpoint reads a checkpoint directory as a safetensors loader does:
// the index, then each shard it names, in name order, header first. It
// returns the shard it failed on and the error.
func loadCheckpoint(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		return "model.safetensors.index.json", err
	}
	var ix struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &ix); err != nil {
		return "model.safetensors.index.json", err
	}
	var shards []string
	for _, sh := range ix.WeightMap {
		if !slices.Contains(shards, sh) {
			shards = append(shards, sh)
		}
	}
	slices.Sort(shards)
	for _, sh := range shards {
		f, err := os.Open(filepath.Join(dir, sh))
		if err != nil {
			return sh, err
		}
		var n [8]byte
		_, err = f.ReadAt(n[:], 0)
		if err == nil {
			_, err = f.ReadAt(make([]byte, min(binary.LittleEndian.Uint64(n[:]), 100<<20)), 8)
		}
		f.Close()
		if err != nil {
			return sh, err
		}
	}
	return "", nil
}

func editIndex(t *testing.T, dir string, edit func(map[string]string)) {
	t.Helper()
	if err := badinput.EditIndex(dir, edit); err != nil {
		t.Fatal(err)
	}
}

// TestNaNScale plants a NaN block scale: it is transcoded as NaN (E4M3
// 0x7F, twice), counted in the report, and nothing else changes.
func TestNaNScale(t *testing.T) {
	needMount(t)
	src := copyTiny(t)
	const name = "layers.1.ffn.experts.2.w3"
	if err := synth.PatchTensor(src, name+".scale", func(b []byte) { b[5] = 255 }); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, src)
	var rep struct {
		Tensors []struct {
			Tensor string `json:"tensor"`
			NaN    int64  `json:"nan"`
		} `json:"tensors"`
	}
	b, err := os.ReadFile(m.path("nvfp4", "TRANSCODE.json"))
	if err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("TRANSCODE.json: %v", err)
	}
	nan := 0
	for _, r := range rep.Tensors {
		if r.NaN != 0 {
			nan++
			if r.Tensor != name || r.NaN != 1 {
				t.Fatalf("report row %+v", r)
			}
		}
	}
	if nan != 1 {
		t.Fatalf("%d tensors report NaN blocks, want 1", nan)
	}
	out := export(t, "nvfp4", src)
	for _, f := range files(t, out) {
		run(t, "cmp", m.path("nvfp4", f), filepath.Join(out, f))
	}
}

// TestSourceChangesUnderTheMount changes and truncates a shard while
// mounted: derived reads fail with EIO (never mixed bytes, never a crash)
// and the mount keeps serving everything else.
func TestSourceChangesUnderTheMount(t *testing.T) {
	needMount(t)
	src := copyTiny(t)
	m := startMount(t, src)
	view := m.path("engram-fp4", badShard)
	if _, err := os.ReadFile(view); err != nil {
		t.Fatal(err)
	}
	// Drop what the kernel cached of the view so reads reach dsfs again.
	shard := filepath.Join(src, badShard)
	fi, _ := os.Stat(shard)
	for _, change := range []struct {
		name string
		do   func()
	}{
		{"rewritten", func() { patchBytes(t, shard, fi.Size()-1, []byte{1}) }},
		{"truncated", func() { os.Truncate(shard, fi.Size()/2) }},
	} {
		change.do()
		dropCaches(t)
		_, err := os.ReadFile(view)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s source: reading the view gave %v, want EIO", change.name, err)
		}
	}
	if !strings.Contains(m.log.String(), badShard) {
		t.Fatalf("the log does not name the changed shard:\n%s", m.log)
	}
	if _, err := os.ReadFile(m.path("engram-fp4", goodShard)); err != nil {
		t.Fatalf("good shard after a bad read: %v", err)
	}
	if _, err := os.ReadFile(m.path(".dsfs", "stats.json")); err != nil {
		t.Fatal(err)
	}
}

func dropCaches(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		t.Skipf("cannot drop the page cache: %v", err)
	}
}

// TestWritesAreRefused tries every kind of modification.
func TestWritesAreRefused(t *testing.T) {
	m := startMount(t, tinySrc)
	f := m.path("nvfp4", goodShard)
	tests := []struct {
		name string
		do   func() error
	}{
		{"open for writing", func() error { _, err := os.OpenFile(f, os.O_WRONLY, 0); return err }},
		{"truncate", func() error { return os.Truncate(f, 0) }},
		{"create", func() error { _, err := os.Create(m.path("nvfp4", "new")); return err }},
		{"mkdir", func() error { return os.Mkdir(m.path("nvfp4", "d"), 0o755) }},
		{"chmod", func() error { return os.Chmod(f, 0o777) }},
		{"rename", func() error { return os.Rename(f, m.path("nvfp4", "x")) }},
		{"unlink", func() error { return os.Remove(f) }},
		{"rmdir", func() error { return os.Remove(m.path("source")) }},
		{"symlink", func() error { return os.Symlink("x", m.path("nvfp4", "l")) }},
		{"link", func() error { return os.Link(f, m.path("nvfp4", "l")) }},
	}
	for _, tt := range tests {
		if err := tt.do(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", tt.name, err)
		}
	}
	if _, err := os.Stat(f); err != nil {
		t.Fatalf("file gone after refused writes: %v", err)
	}
}

// TestMountLifecycle: a second mount on the same point fails clearly, and
// `dsfs umount` ends the first.
func TestMountLifecycle(t *testing.T) {
	m := startMount(t, tinySrc)
	out, err := exec.Command(dsfsBin, "mount", tinySrc, m.dir).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("already a mount point")) {
		t.Fatalf("second mount: %v\n%s", err, out)
	}
	if lines := strings.Count(strings.TrimSpace(string(out)), "\n"); lines != 0 {
		t.Fatalf("second mount printed %d lines, want one:\n%s", lines+1, out)
	}
	run(t, dsfsBin, "umount", m.dir)
	<-m.done
	if m.exited != nil {
		t.Fatalf("mount exited with %v after umount\n%s", m.exited, m.log)
	}
	if _, err := os.Stat(filepath.Join(m.dir, ".dsfs")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("still mounted after dsfs umount: %v", err)
	}
	if out, err := exec.Command(dsfsBin, "umount", m.dir).CombinedOutput(); err == nil {
		t.Fatalf("umount of a plain directory succeeded: %s", out)
	}
}

// TestMountAsNormalUser mounts through fusermount3 as user nobody, reads
// as that user, and unmounts with `dsfs umount`.
func TestMountAsNormalUser(t *testing.T) {
	nb := nobody(t)
	setpriv, as := nb[0], nb[1:]
	mnt := nobodyDir(t)
	src := filepath.Join(filepath.Dir(mnt), "src")
	run(t, "cp", "-a", tinySrc, src)
	run(t, "chmod", "-R", "a+rX", src)
	unmountAtEnd(t, mnt)
	p := startProc(t, exec.Command(setpriv, append(as, dsfsBin, "mount", src, mnt)...))
	p.waitReadyAs(t, mnt, nb)
	out := run(t, setpriv, append(as, "sha256sum", filepath.Join(mnt, "nvfp4", goodShard))...)
	if len(strings.Fields(out)) == 0 {
		t.Fatal("no hash read as nobody")
	}
	run(t, setpriv, append(as, dsfsBin, "umount", mnt)...)
	if <-p.done; p.exited != nil {
		t.Fatalf("mount as nobody exited with %v\n%s", p.exited, p.log)
	}
}

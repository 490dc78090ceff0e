package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/tinyckpt"
	"golang.org/x/sys/unix"
)

// needXattr skips a test whose reruns depend on the export records when the
// temporary directory's filesystem keeps no user extended attributes.
func needXattr(t *testing.T) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.dsfs.probe", []byte("1"), 0); err != nil {
		t.Skipf("%s keeps no user extended attributes: %v", filepath.Dir(p), err)
	}
}

// tree returns the regular files below dir by relative path, with their
// bytes; it fails on anything else but directories.
func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			t.Errorf("%s: not a regular file", p)
			return nil
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sameTree(t *testing.T, got, want map[string][]byte) {
	t.Helper()
	for name, b := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s missing", name)
		} else if !bytes.Equal(g, b) {
			t.Errorf("%s differs from a clean export", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is not in a clean export", name)
		}
	}
}

// complete checks that a file under a real name is whole: its record
// names its size and digest.
func complete(t *testing.T, p string, b []byte) {
	t.Helper()
	rec, ok, err := readRecord(p)
	sum := sha256.Sum256(b)
	if err != nil || !ok || rec.size != int64(len(b)) || rec.sha256 != hex.EncodeToString(sum[:]) {
		t.Errorf("%s: %d bytes, record %+v (%v, %v): a partial file under a real name", p, len(b), rec, ok, err)
	}
}

var exportedRE = regexp.MustCompile(`: (\d+) files written, (\d+) already complete`)

// exportCounts runs dsfs export and returns the files it wrote and kept.
func exportCounts(t *testing.T, args ...string) (written, skipped string) {
	t.Helper()
	stdout, stderr, status := dsfs(t, append([]string{"export"}, args...)...)
	m := exportedRE.FindStringSubmatch(stdout)
	if status != 0 || m == nil {
		t.Fatalf("dsfs export %s: status %d\n%s%s", strings.Join(args, " "), status, stdout, stderr)
	}
	return m[1], m[2]
}

// TestExportInterruptedAndRerun interrupts an export of q2/ with SIGINT
// while a file is being written, then checks that no partial file is left
// under a real name, that a rerun keeps what was finished and completes
// the rest, and that a rerun rewrites a file that was corrupted or cut
// short and removes the temporary file of a killed run.
func TestExportInterruptedAndRerun(t *testing.T) {
	needXattr(t)
	tinyckpt.Settle(t, tinySrc)
	want := tree(t, exportDir(t, "q2"))
	out := t.TempDir()
	cmd := exec.Command(dsfsBin, "export", "q2", tinySrc, out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Wait until a shard is being written after at least one file is done.
	deadline := time.Now().Add(60 * time.Second)
	for {
		tmps, _ := filepath.Glob(filepath.Join(out, ".quant-*"+tmpSuffix))
		done, _ := filepath.Glob(filepath.Join(out, "*"))
		if len(tmps) > 0 && len(done) > 0 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("export finished before it could be interrupted (%v)", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("no shard was being written after 60 s")
		}
	}
	cmd.Process.Signal(os.Interrupt)
	var ee *exec.ExitError
	if err := <-exited; !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("interrupted export: %v\n%s", err, stderr.String())
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			t.Errorf("%s left behind", e.Name())
		}
	}
	finished := tree(t, out)
	for name, b := range finished {
		complete(t, filepath.Join(out, name), b)
	}
	if len(finished) == 0 || len(finished) >= len(want) {
		t.Fatalf("interrupted with %d of %d files written", len(finished), len(want))
	}

	written, skipped := exportCounts(t, "q2", tinySrc, out)
	if skipped != strconv.Itoa(len(finished)) || written != strconv.Itoa(len(want)-len(finished)) {
		t.Errorf("rerun wrote %s and kept %s, want %d and %d", written, skipped, len(want)-len(finished), len(finished))
	}
	sameTree(t, tree(t, out), want)

	// One file changed in place (same size), one cut short, and the
	// temporary file of a run that was killed.
	f, err := os.OpenFile(filepath.Join(out, "plan.json"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), 10)
	f.Close()
	if err := os.Truncate(filepath.Join(out, "quant-00004-of-00014.safetensors"), 1000); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(out, ".README.md"+tmpSuffix)
	os.WriteFile(stale, []byte("partial"), 0o644)
	if written, skipped := exportCounts(t, "q2", tinySrc, out); written != "2" || skipped != strconv.Itoa(len(want)-2) {
		t.Errorf("rerun after damage wrote %s and kept %s, want 2 and %d", written, skipped, len(want)-2)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale %s not removed (%v)", stale, err)
	}
	sameTree(t, tree(t, out), want)
}

// exportDir exports a view into a new directory and returns it.
func exportDir(t *testing.T, view string) string {
	t.Helper()
	out := t.TempDir()
	exportCounts(t, view, tinySrc, out)
	return out
}

// TestExportRefuses checks every export directory dsfs export must not
// write into: it exits 1 with one line saying why, and changes nothing.
func TestExportRefuses(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("do not touch"), 0o644); err != nil {
		t.Fatal(err)
	}
	outsideDir := t.TempDir()
	srcLink := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(tinySrc, srcLink); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		view  string
		setup func(t *testing.T, out string) string // returns OUT
		want  string
	}{
		{"the source", "source", func(t *testing.T, _ string) string { return tinySrc }, "is the source checkpoint"},
		{"inside the source", "nvfp4", func(t *testing.T, _ string) string { return filepath.Join(tinySrc, "sub", "out") }, "is inside the source checkpoint"},
		{"inside the source through a link", "nvfp4", func(t *testing.T, _ string) string { return filepath.Join(srcLink, "out") }, "is inside the source checkpoint"},
		{"a link to a file outside", "nvfp4", func(t *testing.T, out string) string {
			os.Symlink(outside, filepath.Join(out, "config.json"))
			return out
		}, "config.json is a symbolic link (to " + outside + "), and dsfs export never writes through links"},
		{"a link to a directory outside", "manifest", func(t *testing.T, out string) string {
			os.Symlink(outsideDir, filepath.Join(out, "shards"))
			return out
		}, "shards is a symbolic link"},
		{"a Hugging Face snapshot", "q2", func(t *testing.T, out string) string {
			snap := filepath.Join(out, "snapshots", "abc")
			os.MkdirAll(snap, 0o755)
			os.Symlink("../../blobs/0123456789abcdef", filepath.Join(snap, "README.txt"))
			return snap
		}, "looks like a Hugging Face snapshot"},
		{"a file it did not write", "nvfp4", func(t *testing.T, out string) string {
			os.WriteFile(filepath.Join(out, "config.json"), []byte("mine"), 0o644)
			os.WriteFile(filepath.Join(out, "TRANSCODE.json"), []byte("mine"), 0o644)
			return out
		}, ".json exists and was not written by dsfs export; dsfs export replaces only its own files (and 1 more)"},
		{"a directory where a file goes", "nvfp4", func(t *testing.T, out string) string {
			os.Mkdir(filepath.Join(out, "config.json"), 0o755)
			return out
		}, "config.json is not a regular file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := tt.setup(t, t.TempDir())
			before := snapshot(t, filepath.Dir(out))
			srcBefore := snapshot(t, tinySrc)
			stdout, stderr, status := dsfs(t, "export", tt.view, tinySrc, out)
			if status != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("status %d, stdout %q, stderr %q; want 1 and one line containing %q", status, stdout, stderr, tt.want)
			}
			if after := snapshot(t, filepath.Dir(out)); after != before {
				t.Errorf("the export directory changed:\n%s\nwas\n%s", after, before)
			}
			if after := snapshot(t, tinySrc); after != srcBefore {
				t.Errorf("the source changed:\n%s\nwas\n%s", after, srcBefore)
			}
			if b, _ := os.ReadFile(outside); string(b) != "do not touch" {
				t.Errorf("wrote through a link: %q", b)
			}
			if ents, _ := os.ReadDir(outsideDir); len(ents) != 0 {
				t.Errorf("wrote %d entries through a directory link", len(ents))
			}
		})
	}
}

// TestExportLocked checks that a second export into a directory another
// one is writing is refused.
func TestExportLocked(t *testing.T) {
	out := t.TempDir()
	fd, err := unix.Open(out, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	_, stderr, status := dsfs(t, "export", "nvfp4", tinySrc, out)
	if status != 1 || !strings.Contains(stderr, "another dsfs export is writing there") {
		t.Errorf("status %d, stderr %q", status, stderr)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("wrote %d entries into a locked directory", len(ents))
	}
}

// snapshot describes every entry below dir (name, type, size, link target,
// content digest), to tell whether anything changed.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, _ := d.Info()
		b.WriteString(p + " " + fi.Mode().String())
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			b.WriteString(" -> " + target)
		case d.Type().IsRegular():
			data, _ := os.ReadFile(p)
			sum := sha256.Sum256(data)
			b.WriteString(" " + hex.EncodeToString(sum[:8]))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// TestExportViewOptions checks that export takes the options views declare
// (manifest/'s --tp and --no-hash), that they reach the view, and that a
// rerun with other values rewrites the files they change.
func TestExportViewOptions(t *testing.T) {
	needXattr(t)
	tinyckpt.Settle(t, tinySrc)
	out := t.TempDir()
	manifest := func() (tp int, hashed bool) {
		t.Helper()
		var doc struct {
			TP     int  `json:"tp"`
			Hashed bool `json:"hashed"`
		}
		b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.TP, doc.Hashed
	}
	exportCounts(t, "manifest", "--tp", "4", "--no-hash", tinySrc, out)
	if tp, hashed := manifest(); tp != 4 || hashed {
		t.Fatalf("export --tp 4 --no-hash: manifest.json has tp %d, hashed %v", tp, hashed)
	}
	if written, _ := exportCounts(t, "manifest", "--tp", "4", "--no-hash", tinySrc, out); written != "0" {
		t.Errorf("a rerun with the same options wrote %s files, want 0", written)
	}
	if written, _ := exportCounts(t, "manifest", "--tp", "1", tinySrc, out); written == "0" {
		t.Error("a rerun with other options kept every file")
	}
	if tp, hashed := manifest(); tp != 1 || !hashed {
		t.Errorf("export --tp 1: manifest.json has tp %d, hashed %v", tp, hashed)
	}
}

// TestExportRerunAfterSourceRewrite holds closed the stale files a rerun
// kept when a source shard's bytes changed and its size and mtime did not
// (rsync -a, cp -p): the export's identity now holds every source file's
// stamp, status-change time included, so the rerun rewrites what changed.
func TestExportRerunAfterSourceRewrite(t *testing.T) {
	needXattr(t)
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(tinySrc)); err != nil {
		t.Fatal(err)
	}
	tinyckpt.Settle(t, src)
	out := t.TempDir()
	exportCounts(t, "nvfp4", src, out)
	shard := "model-00002-of-00014.safetensors"
	before, err := os.ReadFile(filepath.Join(out, shard))
	if err != nil {
		t.Fatal(err)
	}

	p := filepath.Join(src, shard)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 64), fi.Size()-64); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	tinyckpt.Settle(t, src)
	if written, _ := exportCounts(t, "nvfp4", src, out); written == "0" {
		t.Fatal("the rerun kept every file after a source shard changed")
	}
	got, err := os.ReadFile(filepath.Join(out, shard))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, before) {
		t.Error("the exported shard is as it was before the source changed")
	}
}

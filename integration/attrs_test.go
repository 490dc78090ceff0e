package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// workDoc reports whether a path of the mount is a document that needs
// real work (docs/OPERATIONS.md "File sizes and attributes"): it shows size 0 until it
// is first read.
func workDoc(p string) bool {
	base := path.Base(p)
	return base == "TRANSCODE.json" || base == "manifest.json" || strings.HasSuffix(base, ".manifest.json") ||
		strings.HasPrefix(p, "manifest/shards/") || strings.HasPrefix(p, "manifest/views/") ||
		p == "trace/trace.json" || strings.HasPrefix(p, "trace/layers/") && strings.HasSuffix(p, ".json") ||
		strings.HasPrefix(p, "trace/") && strings.HasSuffix(p, ".png") // the figures, drawn from the routes
}

// viewFiles lists the files of a mount's views (.dsfs/ left out).
func viewFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range files(t, dir) {
		if !strings.HasPrefix(f, ".dsfs/") {
			out = append(out, f)
		}
	}
	return out
}

// checkCopy checks that dir holds every file of the mount's views with the
// mount's bytes. A document that needs real work may be empty in the copy
// when docsMayBeEmpty: a tool that copies a fresh mount sees it as empty.
func checkCopy(t *testing.T, m *mount, dir string, docsMayBeEmpty bool) {
	t.Helper()
	want, got := viewFiles(t, m.dir), files(t, dir)
	if !slices.Equal(got, want) {
		t.Fatalf("the copy holds %d files, the mount %d:\ncopy:  %v\nmount: %v", len(got), len(want), got, want)
	}
	for _, f := range want {
		c, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(m.path(f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(b, c) || docsMayBeEmpty && workDoc(f) && len(c) == 0 {
			continue
		}
		t.Errorf("%s: %d bytes in the copy, %d in the mount", f, len(c), len(b))
	}
}

// TestCopyToolsSeeExactSizes copies fresh mounts with tar and git: every
// file whose content follows from the headers comes out whole although
// nothing opened it before its first stat, and once the documents that
// need real work have been read, they come out whole too.
func TestCopyToolsSeeExactSizes(t *testing.T) {
	needMount(t)
	tarCopy := func(m *mount) string {
		out := t.TempDir()
		run(t, "bash", "-o", "pipefail", "-c", `tar -C "$1" --exclude=./.dsfs -cf - . | tar -C "$2" -xf -`, "tar", m.dir, out)
		return out
	}
	t.Run("tar", func(t *testing.T) {
		m := startMount(t, tinySrc)
		checkCopy(t, m, tarCopy(m), true)
		checkCopy(t, m, tarCopy(m), false) // every document has been read
	})
	t.Run("git", func(t *testing.T) {
		m := startMount(t, tinySrc)
		gitAdd := func() string {
			repo, out := t.TempDir(), t.TempDir()
			git := []string{"--git-dir", filepath.Join(repo, ".git")}
			run(t, "git", "init", "-q", repo)
			run(t, "git", append(git, "--work-tree", m.dir, "add", "-A", "--", ".", ":(exclude).dsfs")...)
			run(t, "git", append(git, "--work-tree", out, "checkout-index", "-a", "-f")...)
			return out
		}
		checkCopy(t, m, gitAdd(), true)
		checkCopy(t, m, gitAdd(), false)
	})
}

// statTree stats every path of a mount's views, the root included as "".
func statTree(t *testing.T, dir string) map[string]unix.Stat_t {
	t.Helper()
	out := make(map[string]unix.Stat_t)
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".dsfs" {
			return filepath.SkipDir
		}
		if rel == "." {
			rel = ""
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		out[rel] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mtimeOf(st unix.Stat_t) int64 { return st.Mtim.Nano() }

// TestAttributesAcrossRemount checks inode numbers, link counts and times,
// and that `rsync -a` of the mount, repeated after a remount, transfers
// nothing.
func TestAttributesAcrossRemount(t *testing.T) {
	needMount(t)
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Skip("rsync not installed (apt-get install rsync)")
	}
	src := copyTiny(t)
	m := startMount(t, src)
	first := statTree(t, m.dir)
	dst := t.TempDir()
	run(t, "rsync", "-a", "--exclude=/.dsfs", m.dir+"/", dst+"/")
	m.stop(t)
	m = startMount(t, src)
	second := statTree(t, m.dir)
	// A fresh mount shows the documents that need real work with size 0,
	// so the second rsync sends those alone; once they have been read, a
	// third sends nothing.
	rsync := func() []string {
		out := run(t, "rsync", "-a", "--itemize-changes", "--exclude=/.dsfs", m.dir+"/", dst+"/")
		return regexp.MustCompile(`(?m)^[<>ch.*][fdLDS]\S* (.*)$`).FindAllString(out, -1)
	}
	for _, c := range rsync() {
		if p := strings.Fields(c)[1]; !workDoc(p) {
			t.Errorf("after a remount rsync sent %s", c)
		}
	}
	for _, f := range viewFiles(t, m.dir) {
		if workDoc(f) {
			if _, err := os.ReadFile(m.path(f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if changed := rsync(); len(changed) > 0 {
		t.Errorf("rsync of a mount it has copied sent %d files:\n%s", len(changed), strings.Join(changed, "\n"))
	}

	var srcConfig unix.Stat_t
	if err := unix.Stat(filepath.Join(src, "config.json"), &srcConfig); err != nil {
		t.Fatal(err)
	}
	if first[""].Ino != 1 {
		t.Errorf("root inode %d, want 1", first[""].Ino)
	}
	owner := make(map[uint64]string)
	for p, st := range first {
		if o, dup := owner[st.Ino]; dup {
			t.Errorf("%q and %q share inode %d", p, o, st.Ino)
		}
		owner[st.Ino] = p
		if st.Ino >= 1<<53 {
			t.Errorf("%q: inode %d is not below 2^53", p, st.Ino)
		}
		if again := second[p]; again.Ino != st.Ino || mtimeOf(again) != mtimeOf(st) {
			t.Errorf("%q: inode %d mtime %d, after a remount %d %d", p, st.Ino, mtimeOf(st), again.Ino, mtimeOf(again))
		}
		if st.Atim != st.Mtim || st.Ctim.Nano() < st.Mtim.Nano() {
			t.Errorf("%q: atime %v mtime %v ctime %v", p, st.Atim, st.Mtim, st.Ctim)
		}
		want := uint64(1)
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			want = 2
			ents, err := os.ReadDir(filepath.Join(m.dir, p))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.IsDir() {
					want++
				}
			}
		}
		if st.Nlink != want {
			t.Errorf("%q: %d links, want %d", p, st.Nlink, want)
		}
		// A file of source/ carries its source's times, owner and mode
		// (less the write bits); an nvfp4/ shard the newest of its shard
		// and config.json.
		name, isSource := strings.CutPrefix(p, "source/")
		shard, isShard := strings.CutPrefix(p, "nvfp4/model-")
		if !isSource && !isShard {
			continue
		}
		if isShard {
			name = "model-" + shard
		}
		var s unix.Stat_t
		if err := unix.Stat(filepath.Join(src, name), &s); err != nil {
			t.Fatal(err)
		}
		wantMtime := mtimeOf(s)
		if isShard && !strings.HasSuffix(p, ".json") {
			wantMtime = max(wantMtime, mtimeOf(srcConfig))
		}
		if mtimeOf(st) != wantMtime || st.Uid != s.Uid || st.Gid != s.Gid || st.Mode&0o7777 != s.Mode&0o555 {
			t.Errorf("%s: mode %o uid %d gid %d mtime %d; source %o %d %d %d", p, st.Mode&0o7777, st.Uid, st.Gid, mtimeOf(st), s.Mode&0o7777, s.Uid, s.Gid, wantMtime)
		}
	}
}

// TestStatfsIsSourceSize checks that df reports the size of the source
// checkpoint.
func TestStatfsIsSourceSize(t *testing.T) {
	m := startMount(t, tinySrc)
	var total int64
	for _, f := range files(t, tinySrc) {
		fi, err := os.Stat(filepath.Join(tinySrc, f))
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	out := strings.Fields(run(t, "df", "-B1", "--output=size", m.dir))
	size, err := strconv.ParseInt(out[len(out)-1], 10, 64)
	if err != nil {
		t.Fatalf("df: %v: %v", out, err)
	}
	if want := (total + 4095) / 4096 * 4096; size != want {
		t.Errorf("df says %d bytes; the checkpoint holds %d (%d in 4 KiB blocks)", size, total, want)
	}
}

// TestPermissionsForOtherUsers mounts with --allow-other and reads as user
// nobody: a root file of mode 0600 is not readable through source/ or
// nvfp4/, a 0644 one is, and a 0600 file of nobody's is readable by
// nobody.
func TestPermissionsForOtherUsers(t *testing.T) {
	needMount(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	src := copyTiny(t)
	run(t, "chmod", "-R", "a+rX", src)
	const private, public, own = goodShard, "model-00005-of-00014.safetensors", "tokenizer_config.json"
	if err := os.Chmod(filepath.Join(src, private), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(src, own), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, own), 0o600); err != nil {
		t.Fatal(err)
	}
	// The mount point's parent must be open to nobody; t.TempDir makes it
	// private.
	os.Chmod(filepath.Dir(t.TempDir()), 0o755)
	m := startMount(t, src, "--allow-other")
	asNobody := func(p string) error {
		return exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "head", "-c", "64", m.path(p)).Run()
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"source/" + private, false},
		{"nvfp4/" + private, false},
		{"q2/quant-00003-of-00014.safetensors", false},
		{"nvfp4/TRANSCODE.json", false}, // made from every shard
		{"source/" + public, true},
		{"nvfp4/" + public, true},
		{"source/" + own, true},
		{"nvfp4/" + own, true},
		{"nvfp4/config.json", true},
	} {
		if err := asNobody(tc.path); (err == nil) != tc.ok {
			t.Errorf("nobody reading %s: %v, want readable %v", tc.path, err, tc.ok)
		}
	}
	// Root still reads everything.
	if _, err := os.ReadFile(m.path("nvfp4", private)); err != nil {
		t.Errorf("root reading nvfp4/%s: %v", private, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(m.path("source", own), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o7777 != 0o400 {
		t.Errorf("source/%s: uid %d gid %d mode %o, want 65534 65534 400", own, st.Uid, st.Gid, st.Mode&0o7777)
	}
}

package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSymlinkRule: a symbolic link is followed only when it resolves
// inside the checkpoint (or, for a Hugging Face snapshot, its repository's
// blobs); any other is one problem and the file is left out, its bytes
// never read.
func TestSymlinkRule(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "shadow")
	// Shaped like a shard so that a reader that followed the link would
	// report its "header length".
	if err := os.WriteFile(secret, []byte(lengthPrefixed(0x5345435245543132, "secret")), 0o600); err != nil {
		t.Fatal(err)
	}
	outsideDir := filepath.Dir(secret)
	tests := []struct {
		name    string
		plant   func(t *testing.T, dir string) // after goodCheckpoint and its index
		problem string                         // "file: reason"; "" for none
		file    string                         // a file that must (not) be served
		served  bool
	}{
		{"link to a file outside", func(t *testing.T, dir string) {
			symlink(t, secret, filepath.Join(dir, "notes.txt"))
		}, "notes.txt: " + errOutside.Error(), "notes.txt", false},
		{"relative link climbing out", func(t *testing.T, dir string) {
			rel, _ := filepath.Rel(filepath.Join(dir, "sub"), secret)
			symlink(t, rel, filepath.Join(dir, "sub", "notes.txt"))
		}, "sub/notes.txt: " + errOutside.Error(), "sub/notes.txt", false},
		{"config.json linked outside", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ConfigName))
			symlink(t, secret, filepath.Join(dir, ConfigName))
		}, ConfigName + ": " + errOutside.Error(), ConfigName, false},
		{"link to a file inside", func(t *testing.T, dir string) {
			writeFile(t, dir, "docs/real.txt", "hello")
			symlink(t, filepath.Join("docs", "real.txt"), filepath.Join(dir, "notes.txt"))
		}, "", "notes.txt", true},
		{"link to a directory outside is not followed", func(t *testing.T, dir string) {
			symlink(t, outsideDir, filepath.Join(dir, "elsewhere"))
		}, "", "elsewhere/shadow", false},
		{"shard linked outside", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
			symlink(t, secret, filepath.Join(dir, shard2))
		}, shard2 + ": " + errOutside.Error(), shard2, false},
		{"index entry through a directory link outside", func(t *testing.T, dir string) {
			symlink(t, outsideDir, filepath.Join(dir, "ext"))
			wm := goodCheckpoint(t, t.TempDir())
			wm["x"] = "ext/shadow"
			writeIndex(t, dir, wm)
		}, "ext/shadow: " + errOutside.Error(), "ext/shadow", false},
		{"index entry through a directory link inside", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, shard2), filepath.Join(dir, "real", shard2)); err != nil {
				t.Fatal(err)
			}
			symlink(t, "real", filepath.Join(dir, "alias"))
			wm := goodCheckpoint(t, t.TempDir())
			for k, v := range wm {
				if v == shard2 {
					wm[k] = "alias/" + shard2
				}
			}
			writeIndex(t, dir, wm)
		}, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeIndex(t, dir, goodCheckpoint(t, dir))
			tt.plant(t, dir)
			c := mustOpen(t, dir)
			var problems []string
			for _, p := range c.Problems {
				problems = append(problems, p.String())
			}
			var want []string
			if tt.problem != "" {
				want = []string{tt.problem}
			}
			if !slices.Equal(problems, want) {
				t.Errorf("problems %q, want %q", problems, want)
			}
			for _, p := range c.Problems {
				if strings.Contains(p.Reason, "5345435245543132") || strings.Contains(p.Reason, "6000276099170578738") {
					t.Errorf("the outside file's bytes reached a problem: %s", p)
				}
			}
			if tt.file == "" {
				return
			}
			served := slices.ContainsFunc(c.Files, func(f File) bool { return f.Name == tt.file }) || c.Shard(tt.file) != nil
			if served != tt.served {
				t.Errorf("%s served: %v, want %v", tt.file, served, tt.served)
			}
		})
	}
}

// TestHFSnapshotLinkOutside: a snapshot's links may reach its repository's
// blobs and nothing else.
func TestHFSnapshotLinkOutside(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "models--org--name")
	snap := filepath.Join(repo, "snapshots", "rev")
	writeIndex(t, snap, goodCheckpoint(t, snap))
	writeFile(t, repo, "blobs/0123", "{}")
	writeFile(t, repo, "refs/main", "rev")
	symlink(t, "../../blobs/0123", filepath.Join(snap, "tokenizer.json"))
	symlink(t, "../../refs/main", filepath.Join(snap, "ref.txt"))
	c := mustOpen(t, snap)
	if len(c.Problems) != 1 || c.Problems[0].String() != "ref.txt: "+errOutside.Error() {
		t.Errorf("problems %v, want one for ref.txt", c.Problems)
	}
	if !slices.ContainsFunc(c.Files, func(f File) bool { return f.Name == "tokenizer.json" }) {
		t.Errorf("tokenizer.json (a blob) not served: %v", c.Files)
	}
}

// TestCheckOpened: a file swapped for a link after Open is refused to
// whoever opens the catalogued path again.
func TestCheckOpened(t *testing.T) {
	dir := t.TempDir()
	writeIndex(t, dir, goodCheckpoint(t, dir))
	writeFile(t, dir, "notes.txt", "mine")
	c := mustOpen(t, dir)
	p := filepath.Join(dir, "notes.txt")
	check := func() error {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return c.CheckOpened(p, f)
	}
	if err := check(); err != nil {
		t.Fatalf("unchanged file: %v", err)
	}
	secret := filepath.Join(t.TempDir(), "shadow")
	writeFile(t, filepath.Dir(secret), "shadow", "secret")
	os.Remove(p)
	symlink(t, secret, p)
	if err := check(); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("swapped file: %v, want an error saying it was replaced", err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestCheckOpenedDescriptor: the check on the opened descriptor refuses a
// file outside the roots whatever path opened it, as when a link is
// swapped in between the path check and the open.
func TestCheckOpenedDescriptor(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "inside", "x")
	outside := filepath.Join(t.TempDir(), "outside")
	writeFile(t, filepath.Dir(outside), "outside", "y")
	rs, err := sourceRoots(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		ok   bool
	}{{filepath.Join(dir, "inside"), true}, {outside, false}} {
		f, err := os.Open(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		err = rs.checkOpened(f, filepath.Join(dir, "inside"))
		f.Close()
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok %v", tt.path, err, tt.ok)
		}
	}
}

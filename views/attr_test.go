package views

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/vfile"
)

func TestCombine(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	t1 := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		in   []vfile.Attr
		want vfile.Attr
	}{
		{"one source", []vfile.Attr{{Perm: 0o550, Uid: 7, Gid: 8, Mtime: t0, Ctime: t1}},
			vfile.Attr{Perm: 0o550, Uid: 7, Gid: 8, Mtime: t0, Ctime: t1}},
		{"same owner: bits every source grants, newest times",
			[]vfile.Attr{{Perm: 0o444, Uid: 7, Gid: 8, Mtime: t1, Ctime: t0}, {Perm: 0o440, Uid: 7, Gid: 8, Mtime: t0, Ctime: t1}},
			vfile.Attr{Perm: 0o440, Uid: 7, Gid: 8, Mtime: t1, Ctime: t1}},
		{"owners differ: root owns it",
			[]vfile.Attr{{Perm: 0o444, Uid: 7, Gid: 8}, {Perm: 0o404, Uid: 9, Gid: 8}},
			vfile.Attr{Perm: 0o404, Uid: 0, Gid: 8}},
		{"groups differ: group root, group bits no more than others'",
			[]vfile.Attr{{Perm: 0o444, Uid: 7, Gid: 8}, {Perm: 0o440, Uid: 7, Gid: 9}},
			vfile.Attr{Perm: 0o400, Uid: 7, Gid: 0}},
		{"groups differ, others may read",
			[]vfile.Attr{{Perm: 0o555, Uid: 7, Gid: 8}, {Perm: 0o545, Uid: 7, Gid: 9}},
			vfile.Attr{Perm: 0o545, Uid: 7, Gid: 0}},
	} {
		if got := combine(tc.in...); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// copyDir copies the checkpoint in src (inference/ included) into a new
// directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ckpt")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestAttrsFollowSources checks that each file shows its sources' owner,
// permissions and newest times, and each directory the checkpoint
// directory's.
func TestAttrsFollowSources(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files other owners")
	}
	dir := copyDir(t, tinyDir)
	const (
		private = "model-00003-of-00014.safetensors" // 0600, newest
		other   = "model-00004-of-00014.safetensors" // another owner and group, 0640
		plain   = "model-00005-of-00014.safetensors" // older than config.json
	)
	t0 := time.Unix(1_700_000_000, 0)
	tConfig, tPrivate := t0.Add(time.Hour), t0.Add(2*time.Hour)
	filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error { return os.Chtimes(p, t0, t0) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chtimes(filepath.Join(dir, checkpoint.ConfigName), tConfig, tConfig))
	must(os.Chmod(filepath.Join(dir, private), 0o600))
	must(os.Chtimes(filepath.Join(dir, private), tPrivate, tPrivate))
	must(os.Chown(filepath.Join(dir, other), 1000, 1000))
	must(os.Chmod(filepath.Join(dir, other), 0o640))
	must(os.Chmod(dir, 0o750))

	cat, err := checkpoint.Open(dir)
	must(err)
	s, err := Build(cat, Options{})
	must(err)
	t.Cleanup(func() { s.Close(); cat.Close() })
	dirAttr, err := s.attrOf(dir)
	must(err)
	if dirAttr.Perm != 0o550 {
		t.Fatalf("checkpoint directory: perm %o", dirAttr.Perm)
	}

	for _, tc := range []struct {
		path     string
		perm     uint32
		uid, gid uint32
		mtime    time.Time
	}{
		{"source/" + private, 0o400, 0, 0, tPrivate},
		{"source/" + other, 0o440, 1000, 1000, t0},
		{"source/" + plain, 0o444, 0, 0, t0},
		{"source/config.json", 0o444, 0, 0, tConfig},
		{"nvfp4/" + private, 0o400, 0, 0, tPrivate},
		{"nvfp4/" + plain, 0o444, 0, 0, tConfig}, // config.json names the roles
		{"nvfp4/" + other, 0o400, 0, 0, tConfig}, // owners and groups differ: root's, group bits cut to others'
		{"nvfp4/config.json", 0o444, 0, 0, tConfig},
		{"nvfp4/TRANSCODE.json", 0o400, 0, 0, tPrivate}, // the whole checkpoint
		{"q2/plan.json", 0o400, 0, 0, tPrivate},         // the whole checkpoint
		{"q2/quant-00005-of-00014.safetensors", 0o444, 0, 0, tConfig},
		{"manifest/shards/" + private + ".json", 0o400, 0, 0, tPrivate},
	} {
		n, err := s.Root.Lookup(tc.path)
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		a := n.Attr
		if a.Perm != tc.perm || a.Uid != tc.uid || a.Gid != tc.gid || !a.Mtime.Equal(tc.mtime) {
			t.Errorf("%s: perm %o uid %d gid %d mtime %v, want %o %d %d %v", tc.path, a.Perm, a.Uid, a.Gid, a.Mtime, tc.perm, tc.uid, tc.gid, tc.mtime)
		}
		if a.Ctime.Before(a.Mtime) {
			t.Errorf("%s: ctime %v before mtime", tc.path, a.Ctime)
		}
	}
	s.Root.Walk(func(p string, n *vfile.Node) error {
		if n.IsDir() && n.Attr != dirAttr {
			t.Errorf("directory %q: %+v, want the checkpoint directory's %+v", p, n.Attr, dirAttr)
		}
		return nil
	})
}

// TestHeaderDocs pins which documents follow from the headers (exact size
// from the first stat) and which need real work (no size until read).
func TestHeaderDocs(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	for _, noHash := range []bool{false, true} {
		s, err := Build(cat, Options{Values: map[string]string{"no-hash": strconv.FormatBool(noHash)}})
		if err != nil {
			t.Fatal(err)
		}
		fromHeaders := map[string]bool{
			"q2/plan.json": true, "q2/README.md": true,
			"manifest/summary.json": true, "manifest/README.md": true, "manifest/bytes.png": true,
		}
		if noHash { // manifest/ reads no data
			fromHeaders["manifest/manifest.json"] = true
			for _, sh := range cat.Shards {
				fromHeaders["manifest/shards/"+sh.Name+".json"] = true
			}
		}
		s.Root.Walk(func(p string, n *vfile.Node) error {
			if n.Doc == nil {
				return nil
			}
			if _, sized := n.Doc.Stat(t.Context()); sized != fromHeaders[p] {
				t.Errorf("no-hash %v: %s: size at first stat %v, want %v", noHash, p, sized, fromHeaders[p])
			}
			delete(fromHeaders, p)
			return nil
		})
		if len(fromHeaders) > 0 {
			t.Errorf("no-hash %v: missing %v", noHash, fromHeaders)
		}
		s.Close()
	}
}

// TestHeaderDocsStable: every document that follows from the headers has,
// from its first stat, the size its reads give, and each read gives the
// same bytes, a streamed one (written afresh by each open) included, even
// when the clock moves between reads (manifest/'s generated_utc).
func TestHeaderDocsStable(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	s, err := Build(cat, Options{Values: map[string]string{"no-hash": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	synctest.Test(t, func(t *testing.T) {
		s.Root.Walk(func(p string, n *vfile.Node) error {
			if n.Doc == nil {
				return nil
			}
			size, ok := n.Doc.Stat(t.Context()) // TestHeaderDocs says which have one
			if !ok {
				return nil
			}
			var first []byte
			for i := range 2 {
				time.Sleep(2 * time.Second)
				b, err := n.Doc.Bytes(t.Context())
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if int64(len(b)) != size || (i > 0 && !bytes.Equal(b, first)) {
					t.Fatalf("%s: read %d gave %d bytes (stat said %d), same as the first: %v", p, i, len(b), size, bytes.Equal(b, first))
				}
				first = b
			}
			return nil
		})
	})
}

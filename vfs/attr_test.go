package vfs

import (
	"fmt"
	"testing"

	"github.com/dsfs/dsfs/vfile"
)

// tree is a view tree of dirs directories of files files each, plus extra
// at the top.
func tree(dirs, files int, extra ...string) *vfile.Node {
	var top []*vfile.Node
	for d := range dirs {
		var fs []*vfile.Node
		for f := range files {
			fs = append(fs, &vfile.Node{Name: fmt.Sprintf("model-%05d.safetensors", f), File: vfile.NewFile()})
		}
		top = append(top, vfile.Dir(fmt.Sprintf("view%d", d), fs...))
	}
	for _, e := range extra {
		top = append(top, &vfile.Node{Name: e, File: vfile.NewFile()})
	}
	return vfile.Dir("", top...)
}

func TestInodes(t *testing.T) {
	a := tree(10, 10_000)
	ino := inodes(a)
	if ino[a] != 1 {
		t.Errorf("root inode %d, want 1", ino[a])
	}
	seen := make(map[uint64]string)
	a.Walk(func(p string, n *vfile.Node) error {
		i, ok := ino[n]
		switch {
		case !ok:
			t.Errorf("%q has no inode", p)
		case i == 0 || i >= 1<<53 || (i == 1 && p != ""):
			t.Errorf("%q: inode %d out of range", p, i)
		case seen[i] != "":
			t.Errorf("%q and %q share inode %d", p, seen[i], i)
		}
		seen[i] = p
		return nil
	})
	// The same paths get the same numbers in another mount, whatever else
	// the tree holds.
	b := tree(10, 10_000, "README.md")
	inoB := inodes(b)
	for _, p := range []string{"view0", "view3/model-00042.safetensors", "view9/model-09999.safetensors"} {
		na, _ := a.Lookup(p)
		nb, _ := b.Lookup(p)
		if ino[na] != inoB[nb] {
			t.Errorf("%s: inode %d, then %d", p, ino[na], inoB[nb])
		}
	}
}

// TestInodeCollisions numbers more nodes than a 5-bit space holds half of,
// so that hashes collide, and checks the numbers stay distinct, in range
// and the same for the same tree.
func TestInodeCollisions(t *testing.T) {
	const mask = 1<<5 - 1
	a, b := tree(2, 10), tree(2, 10)
	inoA, inoB := inodesMasked(a, mask), inodesMasked(b, mask)
	seen := make(map[uint64]string)
	a.Walk(func(p string, n *vfile.Node) error {
		i := inoA[n]
		if i == 0 || i > mask || (i == 1) != (p == "") || seen[i] != "" {
			t.Errorf("%q: inode %d (also %q)", p, i, seen[i])
		}
		seen[i] = p
		if nb, _ := b.Lookup(p); inoB[nb] != i {
			t.Errorf("%q: inode %d, then %d", p, i, inoB[nb])
		}
		return nil
	})
}

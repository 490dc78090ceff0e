package vfs

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxIno bounds inode numbers to 53 bits: JavaScript and Python tools
// compare them as doubles.
const maxIno = 1<<53 - 1

// rootIno is the root directory's inode number, as on most file systems
// that start numbering at 1.
const rootIno = 1

// inodes numbers every node of the tree by a hash of its path from the
// mount's root, so that a file keeps its number across remounts. Numbers
// are below 2^53 and never 0 or the root's; a collision (about one in 10^6
// mounts of a 100k-file checkpoint) moves the later path, in walk order, to
// the next free number, so the same tree always gets the same numbers.
func inodes(root *vfile.Node) map[*vfile.Node]uint64 { return inodesMasked(root, maxIno) }

// inodesMasked is inodes with numbers cut to mask, which tests make small
// to force collisions.
func inodesMasked(root *vfile.Node, mask uint64) map[*vfile.Node]uint64 {
	ino := map[*vfile.Node]uint64{root: rootIno}
	used := map[uint64]bool{rootIno: true}
	root.Walk(func(path string, n *vfile.Node) error {
		if n == root {
			return nil
		}
		sum := sha256.Sum256([]byte(path))
		i := binary.LittleEndian.Uint64(sum[:]) & mask
		for i == 0 || used[i] {
			i = (i + 1) & mask
		}
		used[i] = true
		ino[n] = i
		return nil
	})
	return ino
}

// setAttr fills the attributes every node shows of its sources. Access
// time is the modification time: reads through the mount are not
// recorded, and a stable atime keeps copies made with -a identical.
func setAttr(out *fuse.Attr, a vfile.Attr) {
	out.Mode = a.Perm
	out.Owner = fuse.Owner{Uid: a.Uid, Gid: a.Gid}
	out.Nlink = 1
	out.SetTimes(&a.Mtime, &a.Mtime, &a.Ctime)
}

// statfsBlock is the block size statfs reports sizes in.
const statfsBlock = 4096

// statfs reports the mount as a full read-only file system the size of
// the source checkpoint, holding the mount's files.
func (m *Mount) statfs(out *fuse.StatfsOut) {
	out.Bsize = statfsBlock
	out.Frsize = statfsBlock
	out.Blocks = (uint64(m.sourceBytes) + statfsBlock - 1) / statfsBlock
	out.Files = uint64(len(m.ino))
	out.NameLen = 255
}

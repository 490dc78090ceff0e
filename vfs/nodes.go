// Package vfs serves view trees over FUSE (go-fuse): read-only directory and
// file nodes whose reads go through views.Reader and the block cache, and
// the live status files under .dsfs/.
package vfs

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/views"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// immutable is the attribute and entry timeout of content that never
// changes for the life of the mount.
const immutable = 24 * time.Hour

// counters are the mount's own figures, shown in .dsfs/stats.json.
type counters struct {
	reads, bytes, errors, opens, passthrough atomic.Int64
}

// readOnly answers every modifying operation with EROFS. The kernel sees the
// mount as "ro" already; these make sure no request slips through to
// go-fuse's defaults (which, for unlink and rmdir, report success).
type readOnly struct{ fs.Inode }

var _ = (interface {
	fs.NodeSetattrer
	fs.NodeCreater
	fs.NodeMkdirer
	fs.NodeMknoder
	fs.NodeLinker
	fs.NodeSymlinker
	fs.NodeUnlinker
	fs.NodeRmdirer
	fs.NodeRenamer
	fs.NodeSetxattrer
	fs.NodeRemovexattrer
})((*readOnly)(nil))

func (*readOnly) Setattr(context.Context, fs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}
func (*readOnly) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}
func (*readOnly) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (*readOnly) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (*readOnly) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (*readOnly) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (*readOnly) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }
func (*readOnly) Rmdir(context.Context, string) syscall.Errno  { return syscall.EROFS }
func (*readOnly) Rename(context.Context, string, fs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}
func (*readOnly) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return syscall.EROFS
}
func (*readOnly) Removexattr(context.Context, string) syscall.Errno { return syscall.EROFS }

// writeFlags are open flags that ask for writing.
const writeFlags = syscall.O_WRONLY | syscall.O_RDWR | syscall.O_TRUNC | syscall.O_APPEND | syscall.O_CREAT

// dirNode is a directory of a view tree.
type dirNode struct {
	readOnly
	m *Mount
	n *views.Node
}

var _ = (fs.NodeOnAdder)((*dirNode)(nil))
var _ = (fs.NodeGetattrer)((*dirNode)(nil))

// OnAdd builds the whole tree at mount: it is small (files, not tensors),
// and persistent inodes keep lookups free of allocation.
func (d *dirNode) OnAdd(ctx context.Context) {
	for _, c := range d.n.Children {
		var child fs.InodeEmbedder
		mode := uint32(syscall.S_IFREG)
		switch {
		case c.IsDir():
			child, mode = &dirNode{m: d.m, n: c}, syscall.S_IFDIR
		case c.File != nil:
			child = &fileNode{m: d.m, f: c.File, name: c.Name}
		default:
			child = &docNode{m: d.m, gen: c.Doc.Bytes, size: c.Doc.Size, name: c.Name, live: c.Doc.Live()}
		}
		d.AddChild(c.Name, d.NewPersistentInode(ctx, child, fs.StableAttr{Mode: mode}), false)
	}
}

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o555
	out.SetTimes(nil, &d.m.start, &d.m.start)
	out.SetTimeout(immutable)
	return 0
}

// fileNode is a file of known size, served page-cacheable.
type fileNode struct {
	readOnly
	m    *Mount
	f    *views.File
	name string
}

var _ = (fs.NodeGetattrer)((*fileNode)(nil))
var _ = (fs.NodeOpener)((*fileNode)(nil))

func (f *fileNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	out.Size = uint64(f.f.Size())
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.SetTimes(nil, &f.m.start, &f.m.start)
	out.SetTimeout(immutable)
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, syscall.EROFS
	}
	f.m.ctr.opens.Add(1)
	h := &fileHandle{m: f.m, r: views.NewReader(f.f, f.m.cache), name: f.name, fd: -1}
	if f.f.Source != "" && f.m.passthrough {
		// The kernel may read an unchanged source file directly; go-fuse asks
		// for the descriptor once and falls back to our Read if it cannot.
		if fd, err := syscall.Open(f.f.Source, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
			h.fd = fd
		}
	}
	return h, fuse.FOPEN_KEEP_CACHE, 0
}

// fileHandle is one open of a fileNode.
type fileHandle struct {
	m    *Mount
	r    *views.Reader
	name string
	fd   int // source descriptor for kernel passthrough, -1 if none
}

var _ = (fs.FileReader)((*fileHandle)(nil))
var _ = (fs.FileReleaser)((*fileHandle)(nil))
var _ = (fs.FilePassthroughFder)((*fileHandle)(nil))

func (h *fileHandle) PassthroughFd() (int, bool) {
	if h.fd < 0 {
		return 0, false
	}
	h.m.ctr.passthrough.Add(1)
	return h.fd, true
}

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.r.ReadAtContext(ctx, dest, off)
	if err != nil && n < len(dest) && !errors.Is(err, io.EOF) {
		if ctx.Err() != nil {
			return nil, syscall.EINTR
		}
		h.m.ctr.errors.Add(1)
		h.m.errs.error(h.m.log, "read failed", h.name, err, "offset", off)
		return nil, syscall.EIO
	}
	h.m.ctr.reads.Add(1)
	h.m.ctr.bytes.Add(int64(n))
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	if h.fd >= 0 {
		syscall.Close(h.fd)
		h.fd = -1
	}
	return 0
}

// docNode is a generated document: its size is unknown until it is first
// opened, so it is served with direct I/O and a zero attribute timeout.
type docNode struct {
	readOnly
	m    *Mount
	gen  func(ctx context.Context) ([]byte, error)
	size func() (int64, bool)
	name string
	live bool // status: not counted as bytes served
}

var _ = (fs.NodeGetattrer)((*docNode)(nil))
var _ = (fs.NodeOpener)((*docNode)(nil))

func (d *docNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	if n, ok := d.size(); ok {
		out.Size = uint64(n)
	}
	out.SetTimes(nil, &d.m.start, &d.m.start)
	return 0 // zero timeout: the size appears once computed
}

func (d *docNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, syscall.EROFS
	}
	d.m.ctr.opens.Add(1)
	b, err := d.gen(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, syscall.EINTR
		}
		d.m.ctr.errors.Add(1)
		d.m.errs.error(d.m.log, "generating document failed", d.name, err)
		return nil, 0, syscall.EIO
	}
	return &docHandle{m: d.m, b: b, live: d.live}, fuse.FOPEN_DIRECT_IO, 0
}

type docHandle struct {
	m    *Mount
	b    []byte
	live bool
}

var _ = (fs.FileReader)((*docHandle)(nil))

func (h *docHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.b)) {
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, h.b[off:])
	if !h.live {
		h.m.ctr.reads.Add(1)
		h.m.ctr.bytes.Add(int64(n))
	}
	return fuse.ReadResultData(dest[:n]), 0
}

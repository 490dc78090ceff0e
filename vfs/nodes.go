// Package vfs serves view trees over FUSE (go-fuse): read-only directory and
// file nodes whose reads go through vfile.Reader and the block cache, and
// the live status files under .dsfs/.
package vfs

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// immutable is the attribute and entry timeout of content that never
// changes for the life of the mount.
const immutable = 24 * time.Hour

// counters are the mount's own figures, shown in .dsfs/stats.json.
type counters struct {
	reads, bytes, errors, opens, passthrough atomic.Int64
	// splicedReplies are replies that carried source bytes by splice;
	// copiedReplies those whose source bytes were read into memory
	// (splicing off, or a reply of too many pieces for a pipe).
	splicedReplies, copiedReplies atomic.Int64
	// largestRead is the most bytes one read of a file served: 1 MiB when
	// the mount's request size and read-ahead took effect.
	largestRead atomic.Int64
}

// read counts a read of a file that served n bytes.
func (c *counters) read(n int) {
	c.reads.Add(1)
	c.bytes.Add(int64(n))
	for {
		l := c.largestRead.Load()
		if int64(n) <= l || c.largestRead.CompareAndSwap(l, int64(n)) {
			return
		}
	}
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
	n *vfile.Node
}

var _ = (fs.NodeOnAdder)((*dirNode)(nil))
var _ = (fs.NodeGetattrer)((*dirNode)(nil))
var _ = (fs.NodeStatfser)((*dirNode)(nil))

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
			child = &fileNode{m: d.m, f: c.File, name: c.Name, attr: c.Attr}
		default:
			child = &docNode{m: d.m, doc: c.Doc, name: c.Name, attr: c.Attr}
		}
		d.AddChild(c.Name, d.NewPersistentInode(ctx, child, fs.StableAttr{Mode: mode, Ino: d.m.ino[c]}), false)
	}
}

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setAttr(&out.Attr, d.n.Attr)
	out.Nlink = 2 // its entry in the parent and its own "."
	for _, c := range d.n.Children {
		if c.IsDir() {
			out.Nlink++ // the child's ".."
		}
	}
	out.SetTimeout(immutable)
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	d.m.statfs(out)
	return 0
}

// fileNode is a file of known size, served page-cacheable.
type fileNode struct {
	readOnly
	m    *Mount
	f    *vfile.File
	name string
	attr vfile.Attr

	// The kernel refuses to open a file for passthrough while it is open
	// cached, and the other way round (EIO): a view file is passed through
	// to its kept copy only while no open of it is cached, and every open
	// while one is passed through is too, to the same copy.
	mu     sync.Mutex
	cached int      // opens served by Read
	passed int      // opens the kernel reads kept from
	kept   *os.File // the kept copy they read, while passed > 0
}

var _ = (fs.NodeGetattrer)((*fileNode)(nil))
var _ = (fs.NodeOpener)((*fileNode)(nil))
var _ = (fs.NodeStatfser)((*fileNode)(nil))

func (f *fileNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setAttr(&out.Attr, f.attr)
	out.Size = uint64(f.f.Size())
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.SetTimeout(immutable)
	return 0
}

func (f *fileNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	f.m.statfs(out)
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, syscall.EROFS
	}
	f.m.ctr.opens.Add(1)
	life, closed := context.WithCancel(f.m.life)
	h := &fileHandle{m: f.m, r: f.m.open(life, f.f), closed: closed, name: f.name, fd: -1, node: f}
	if f.f.Origin == nil && f.m.kept != nil {
		f.openView(h)
	}
	if f.f.Origin != nil && f.m.passthrough {
		// The kernel may read an unchanged source file directly; go-fuse asks
		// for the descriptor once and falls back to our Read if it cannot.
		// While another open has one, go-fuse hands the kernel that one
		// without asking, so a file changed since the mount opened it fails
		// here, not in Read.
		fd, err := f.f.Origin.Reopen()
		if errors.Is(err, sourcefile.ErrChanged) {
			closed()
			f.m.ctr.errors.Add(1)
			if logSourceError(err) {
				f.m.log.Error("open failed", "file", f.name, "err", err)
			}
			return nil, 0, syscall.EIO
		}
		if err == nil {
			h.fd = fd
		}
	}
	return h, fuse.FOPEN_KEEP_CACHE, 0
}

// openView decides whether open h of a view file is passed through to
// the file's kept copy or served by Read (see fileNode.mu).
func (f *fileNode) openView(h *fileHandle) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.passed == 0 && f.cached == 0 && f.m.passthrough {
		f.kept = f.m.keptFile(f.f)
	}
	if f.kept == nil {
		f.cached++
		return
	}
	f.passed++
	h.passed = true
	// Every open hands go-fuse the same descriptor: it asks only the first
	// while it holds one, but two opens may race to be that first.
	h.fd = int(f.kept.Fd())
}

// releaseView ends open h of a view file.
func (f *fileNode) releaseView(h *fileHandle) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !h.passed {
		f.cached--
		return
	}
	h.fd = -1 // f.kept's, closed with the last open passed through
	if f.passed--; f.passed == 0 {
		f.kept.Close()
		f.kept = nil
	}
}

// fileHandle is one open of a fileNode.
type fileHandle struct {
	m      *Mount
	r      *vfile.Reader
	closed context.CancelFunc // ends the reader's read-ahead
	name   string
	fd     int       // descriptor for kernel passthrough, -1 if none
	node   *fileNode // whose cached pages a raced reply drops (recheck)
	// passed says the kernel reads a view file's kept copy (fd).
	passed bool
	// served counts the bytes Read served, when the file may be kept.
	served atomic.Int64
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
	ctx, answered := h.m.callers.context(ctx)
	defer answered()
	pieces, n, err := h.r.ReadPieces(ctx, dest, off)
	var res fuse.ReadResult
	if err == nil || errors.Is(err, io.EOF) {
		res, err = h.answer(pieces, n, dest)
	}
	if err != nil {
		vfile.Release(pieces)
		if errno, ok := h.m.canceled(ctx); ok {
			return nil, errno
		}
		h.m.ctr.errors.Add(1)
		if logSourceError(err) {
			h.m.errs.error(h.m.log, "read failed", h.name, err, "offset", off)
		}
		return nil, syscall.EIO
	}
	h.m.ctr.read(n)
	if h.m.kept != nil && h.m.passthrough && h.node.f.Origin == nil {
		// Offered once, when the open has served the file's size.
		size := h.node.f.Size()
		if total := h.served.Add(int64(n)); total >= size && total-int64(n) < size {
			h.m.kept.ReadWhole(h.node.f)
		}
	}
	return res, 0
}

func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	h.closed()
	if h.node.f.Origin == nil && h.m.kept != nil {
		h.node.releaseView(h)
	}
	if h.fd >= 0 {
		syscall.Close(h.fd)
		h.fd = -1
	}
	return 0
}

// docNode is a generated document. One that follows from the headers is
// generated (or, if streamed, measured) by its first stat; any other has
// size 0 until first opened.
// Until its size is known it is served with a zero attribute timeout, so
// every stat asks again and sees the size once computed; after that its
// attributes are as immutable as a file's. Reads use direct I/O.
type docNode struct {
	readOnly
	m    *Mount
	doc  *vfile.Doc
	name string
	attr vfile.Attr
}

var _ = (fs.NodeGetattrer)((*docNode)(nil))
var _ = (fs.NodeOpener)((*docNode)(nil))
var _ = (fs.NodeStatfser)((*docNode)(nil))

func (d *docNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setAttr(&out.Attr, d.attr)
	if d.doc.Live() {
		// A live document (.dsfs/stats.json) is how scripts tell that the
		// mount is up, so it appears only once go-fuse's start-up probe has
		// closed the file it opens in the mount: a dsfs killed while that
		// file is open hangs in exit, flushing it to itself.
		select {
		case <-d.m.served:
		case <-ctx.Done():
			return syscall.EINTR
		}
		now := time.Now()
		out.SetTimes(&now, &now, &now)
		return 0
	}
	// A failure shows as size 0 here and is reported by the open, once,
	// rather than by every stat.
	ctx, answered := d.m.callers.context(ctx)
	defer answered()
	if n, ok := d.doc.Stat(ctx); ok {
		out.Size = uint64(n)
		out.SetTimeout(immutable)
	}
	return 0
}

func (d *docNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	d.m.statfs(out)
	return 0
}

// generate returns the document, logging a failure once per request.
func (d *docNode) generate(ctx context.Context) ([]byte, syscall.Errno) {
	b, err := d.doc.Bytes(ctx)
	if err != nil {
		if errno, ok := d.m.canceled(ctx); ok {
			return nil, errno
		}
		d.m.ctr.errors.Add(1)
		if logSourceError(err) {
			d.m.errs.error(d.m.log, "generating document failed", d.name, err)
		}
		return nil, syscall.EIO
	}
	return b, 0
}

func (d *docNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, syscall.EROFS
	}
	d.m.ctr.opens.Add(1)
	ctx, answered := d.m.callers.context(ctx)
	defer answered()
	b, errno := d.generate(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	return &docHandle{m: d.m, b: b, live: d.doc.Live()}, fuse.FOPEN_DIRECT_IO, 0
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
	b := h.b[off:min(off+int64(len(dest)), int64(len(h.b)))]
	if !h.live {
		h.m.ctr.reads.Add(1)
		h.m.ctr.bytes.Add(int64(len(b)))
	}
	// A vector is written to /dev/fuse from where it lies, and go-fuse
	// does not try to splice it.
	return fuse.ReadResultVector([][]byte{b}), 0
}

package vfs

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"syscall"
	"unsafe"

	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"golang.org/x/sys/unix"
)

// A read is answered from its pieces (vfile.Reader.ReadPieces) in one of
// three ways:
//
//   - only bytes in memory (computed blocks, literal segments, the
//     request's buffer): a vector of them, which go-fuse writes to
//     /dev/fuse with one writev, copying each byte once, from where it lies;
//   - runs of source files too, when splicing is on: a pipe holding the
//     files' pages (splice(2), no copy) and the bytes in memory (cached
//     blocks by vmsplice(2), no copy; the buffer's bytes copied), which
//     go-fuse splices on to /dev/fuse, where the kernel copies each byte
//     once, into the reader's page;
//   - otherwise the source runs are read into the request's buffer (pread,
//     as every read was before splicing) and the answer is a vector.
//
// go-fuse v2.12 has both halves, fd results that splice and vector results
// that writev, but no result mixing them, and its own splice of an fd
// result happens after Read returns, where nothing could check the file
// after its bytes were taken. So dsfs fills the pipe itself, checks each
// file once its pages are in the pipe (sourcefile.File.SpliceTo) and hands
// go-fuse the pipe, which go-fuse splices as it does its own pipe results.

// pageSize is the kernel's page: a pipe holds one page or part of one per
// slot.
var pageSize = os.Getpagesize()

// spliceSlack is how many pipe slots beyond a full reply's pages a spliced
// reply may use: each piece may start and end inside a page, so a reply of
// k pieces takes up to its pages plus k slots. Replies that need more are
// copied instead (counted as copied).
const spliceSlack = 16

// outHeaderSize is the size of a FUSE reply's header, which go-fuse puts in
// the pipe before the reply's bytes.
const outHeaderSize = 16

// MaxRequest is the largest read request a dsfs mount asks the kernel
// for: the kernel's limit (fs.fuse.max_pages_limit pages, 256 by default:
// 1 MiB), less what a spliced reply must leave free in go-fuse's pipe,
// which go-fuse sizes at most at fs.pipe-max-size as the process found it
// at start (1 MiB by default: 256 pages less one for the header and
// spliceSlack leave 239 pages, 956 KiB).
func MaxRequest() int {
	kernel := maxPagesLimit()
	pipePages := splice.MaxPipeSize() / pageSize
	pages := min(kernel, pipePages-1-spliceSlack)
	if !splice.Resizable() || pages < 32 {
		pages = kernel // no splicing: the kernel's limit alone
	}
	return pages * pageSize
}

// maxPagesLimit is the most pages the kernel puts in one FUSE request.
func maxPagesLimit() int {
	b, err := os.ReadFile("/proc/sys/fs/fuse/max_pages_limit")
	if err != nil {
		return 256 // the kernel's constant before the sysctl existed
	}
	var n int
	if _, err := fmt.Sscan(string(b), &n); err != nil || n < 1 {
		return 256
	}
	return n
}

// pagesSpanned is how many pages bytes [off, off+n) touch: the pipe slots
// a splice or vmsplice of them takes.
func pagesSpanned(off int64, n int) int {
	if n == 0 {
		return 0
	}
	p := int64(pageSize)
	return int((off+int64(n)-1)/p - off/p + 1)
}

// pipeSlotsFor is the slots go-fuse's own pipe has for a reply of size
// bytes: it grows the pipe to the reply, its header and a page, and the
// kernel rounds a pipe up to a power of two pages. One slot holds the
// header.
func pipeSlotsFor(size int) int {
	pages := (outHeaderSize + size + pageSize + pageSize - 1) / pageSize
	return 1 << bits.Len(uint(pages-1))
}

// answer turns a read's pieces into the reply: see the top of this file.
// dest is the request's buffer: Buffered pieces lie in it, and a copied
// reply reads file pieces into it.
// The files whose pages a spliced reply carries are checked again once it
// has been sent (recheck). The reply gives the pieces back (vfile.Release)
// once sent; when answer fails, its caller does.
func (h *fileHandle) answer(pieces []vfile.Piece, n int, dest []byte) (fuse.ReadResult, error) {
	if slices.ContainsFunc(pieces, func(pc vfile.Piece) bool { return pc.File != nil }) {
		if h.m.splice {
			r, err := h.spliced(pieces, n)
			if err == nil || errors.Is(err, sourcefile.ErrChanged) {
				return r, err
			}
			// A pipe that cannot be had or filled: copy, as without splicing.
		}
		h.m.ctr.copiedReplies.Add(1)
	}
	vec := make([][]byte, 0, len(pieces))
	pos := 0
	for _, pc := range pieces {
		if pc.File != nil {
			if err := pc.Fill(dest[pos : pos+pc.N]); err != nil {
				return nil, err
			}
			vec = append(vec, dest[pos:pos+pc.N])
		} else {
			vec = append(vec, pc.Bytes)
		}
		pos += pc.N
	}
	return &vectorReply{vec: vec, size: n, pieces: pieces}, nil
}

// vectorReply is go-fuse's vector result (written to /dev/fuse with one
// writev) that gives its pieces back once written.
type vectorReply struct {
	vec    [][]byte
	size   int // the bytes of vec
	pieces []vfile.Piece
}

var _ fuse.ReadResult = (*vectorReply)(nil)

func (r *vectorReply) Size() int { return r.size }

// Slices hands go-fuse the vector to write, as its own vector result
// does.
func (r *vectorReply) Slices() ([][]byte, fuse.Status) { return r.vec, fuse.OK }

// Bytes concatenates the vector into buf: go-fuse's way when it cannot
// write a vector.
func (r *vectorReply) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, v := range r.vec {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

// Done gives the pieces back: the kernel has copied their bytes.
func (r *vectorReply) Done() {
	vfile.Release(r.pieces)
	r.vec, r.pieces = nil, nil
}

// spliced builds the pipe reply. A file found changed fails the read with
// its error; any other failure leaves the reply to be copied instead.
func (h *fileHandle) spliced(pieces []vfile.Piece, n int) (fuse.ReadResult, error) {
	slots := 0
	for _, pc := range pieces {
		switch {
		case pc.File != nil:
			slots += pagesSpanned(pc.Off, pc.N)
		case pc.Buffered:
			slots += (pc.N + pageSize - 1) / pageSize
		default:
			slots += pagesSpanned(int64(addr(pc.Bytes)), pc.N)
		}
	}
	if slots > pipeSlotsFor(n)-1 {
		return nil, errTooManySlots
	}
	p, err := getPipe(slots)
	if err != nil {
		return nil, err
	}
	r := &pipeReply{p: p, size: n, h: h, pieces: pieces}
	for _, pc := range pieces {
		switch {
		case pc.File != nil:
			if _, err := pc.File.SpliceTo(int(p.WriteFd()), pc.Off, pc.N); err != nil {
				splice.Done(p)
				return nil, err
			}
			r.files = appendFile(r.files, pc.File)
		case pc.Buffered:
			// The request's buffer is go-fuse's and is used again after
			// the reply: its bytes are copied into the pipe.
			err = writePipe(p, pc.Bytes)
		default:
			// A cached block or a literal segment, never modified while
			// the reply holds it: the pipe refers to its pages.
			err = vmsplice(p, pc.Bytes)
		}
		if err != nil {
			splice.Done(p)
			return nil, err
		}
	}
	h.m.ctr.splicedReplies.Add(1)
	return r, nil
}

// errTooManySlots says a reply's pieces need more pipe slots than go-fuse's
// pipe has.
var errTooManySlots = errors.New("reply needs more pipe slots than the pipe has")

// addr is where b's bytes start.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func appendFile(fs []*sourcefile.File, f *sourcefile.File) []*sourcefile.File {
	for _, g := range fs {
		if g == f {
			return fs
		}
	}
	return append(fs, f)
}

// pipeReply is a reply waiting in a pipe. go-fuse splices it to /dev/fuse
// (it asks for the pipe through Stateful, as it does of its own pipe
// results), or, if it cannot, reads it with Bytes.
type pipeReply struct {
	p     *splice.Pair
	size  int
	h     *fileHandle
	files []*sourcefile.File // whose pages the pipe holds
	// pieces hold the memory the pipe refers to until the reply is sent.
	pieces []vfile.Piece
}

var _ fuse.ReadResult = (*pipeReply)(nil)

// Stateful hands go-fuse the pipe to splice from.
func (r *pipeReply) Stateful() (uintptr, int) { return r.p.ReadFd(), r.size }

func (r *pipeReply) Size() int { return r.size }

// Bytes reads the reply out of the pipe: go-fuse's way when splicing to
// /dev/fuse failed.
func (r *pipeReply) Bytes(buf []byte) ([]byte, fuse.Status) {
	n := 0
	for n < r.size {
		// The read end does not block: a pipe holding less than the reply
		// fails it rather than hanging.
		m, err := r.p.Read(buf[n:r.size])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || m <= 0 {
			return nil, fuse.EIO
		}
		n += m
	}
	return buf[:n], fuse.OK
}

// Done runs once the reply has been sent: it checks again the files whose
// pages the reply carried (see recheck), gives the pipe back and then,
// the pipe emptied, the pieces.
func (r *pipeReply) Done() {
	r.h.recheck(r.files)
	splice.Done(r.p)
	vfile.Release(r.pieces)
	r.p, r.pieces = nil, nil
}

// recheck looks at files whose pages a reply carried, once the kernel has
// copied them. A file checked unchanged when its pages entered the pipe may
// be written in place before the kernel copies them, and the copy then
// holds the new bytes: pread never had that window, splice has it for the
// moments between the check and the copy. A write changes the file's
// times before its bytes, so a change there is seen here: the reply may
// have mixed two versions, so the kernel is told to drop the file's cached
// pages, the change is logged (once per file, as every change is), and
// every later read of the file fails, as after any change.
func (h *fileHandle) recheck(files []*sourcefile.File) {
	for _, f := range files {
		if err := f.Check(); err != nil {
			h.m.ctr.errors.Add(1)
			if logSourceError(err) {
				h.m.log.Error("a source file changed while its bytes were being sent; the kernel drops what it cached of the file", "file", h.name, "err", err)
			}
			// Not from this goroutine: the kernel may wait for reads
			// in flight on the file to be answered.
			go h.node.NotifyContent(0, 0)
			return
		}
	}
}

// getPipe returns an empty pipe from go-fuse's pool (the one its own
// spliced replies use) with room for slots pages. Both its ends are non-
// blocking (os.Pipe's): a pipe filled beyond what was reckoned fails the
// reply, which is then copied, rather than hanging it, and the read end is
// only read for what the pipe holds.
func getPipe(slots int) (*splice.Pair, error) {
	p, err := splice.Get()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if err := p.Grow(slots * pageSize); err != nil {
		splice.Drop(p)
		return nil, fmt.Errorf("growing a pipe to %d pages: %w", slots, err)
	}
	return p, nil
}

// writePipe copies b into the pipe.
func writePipe(p *splice.Pair, b []byte) error {
	for len(b) > 0 {
		n, err := p.Write(b)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing a reply into its pipe: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// vmsplice puts b's pages in the pipe by reference.
func vmsplice(p *splice.Pair, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Vmsplice(int(p.WriteFd()), []unix.Iovec{{Base: &b[0], Len: uint64(len(b))}}, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("vmsplice of a reply's block into its pipe: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// go-fuse empties each pipe it is given back into a /dev/null it opens on
// the first and keeps for the life of the process. It is opened here, at
// start, so that no mount leaves a descriptor behind that it did not find.
func init() {
	if !splice.Resizable() {
		return
	}
	if p, err := splice.Get(); err == nil {
		splice.Done(p)
		splice.ClearSplicePool()
	}
}

// closeFreePipes closes the pipes go-fuse's pool keeps for reuse; those a
// reply holds are kept when given back, as a mount serving in the same
// process may still use them.
func closeFreePipes() { splice.ClearSplicePool() }

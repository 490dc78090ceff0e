// Package sourcefile reads the files of a checkpoint while making sure they
// are still the files dsfs opened. A file is identified, when opened, by its
// device, inode, link count, size, modification time and status-change
// time; every read checks the open file against that identity afterwards,
// and what the path names at most every few milliseconds, so a file
// changed, truncated, grown, or replaced by rename under the mount gives an
// error, never bytes of two versions or of another file.
//
// A File is read with pread (ReadAt), handed to the kernel by splice
// (SpliceTo), or read in place through a read-only mapping of the whole
// file (View), for computations that pass over the same bytes twice. A
// mapped page past the end of a file truncated under the read faults; View
// turns the fault into its error, so no way of reading a source can crash
// the server.
//
// A File may also stand for an object of a bucket (FromObject): the Object
// pins the version it opened (an ETag) and its reads fail the same way once
// that version is gone. Such a file has no descriptor, so what needs one
// (SpliceTo, Reopen, LocalFile) says it is not local.
package sourcefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrChanged is wrapped by the errors of reads of a file that changed
// since it was opened: the bytes may mix two versions, so none are
// returned.
var ErrChanged = errors.New("source file changed since it was opened")

// ChangedError is the error of every read of a file after it changed.
type ChangedError struct {
	File *File
	How  string // truncated, grown, rewritten, replaced or gone, with figures
}

// Error names the file and says how it changed.
func (e *ChangedError) Error() string {
	return e.File.path + ": " + ErrChanged.Error() + ": " + e.How
}

// Unwrap makes errors.Is(err, ErrChanged) hold.
func (e *ChangedError) Unwrap() error { return ErrChanged }

// identity is what tells one version of a file from another. The
// status-change time catches an in-place write whose modification time was
// put back (touch -d), which the modification time alone misses.
// The link count drops when the file is removed or renamed over, whatever
// the filesystem's time granularity.
type identity struct {
	dev, ino, nlink uint64
	size            int64
	mtime, ctime    syscall.Timespec
}

func identityOf(st *syscall.Stat_t) identity {
	return identity{dev: st.Dev, ino: st.Ino, nlink: uint64(st.Nlink), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// Stamp is one version of a file as stat(2) tells it: what a cache of
// facts derived from the file's bytes (digests, value statistics, an
// export's finished files) is keyed by. The status-change time is what
// makes it a key: rewriting a file in place and putting its modification
// time back (rsync -a, cp -p, touch -d) moves the status-change time, which
// no unprivileged call can set. The link count is left out, since a hard
// link changes no byte.
//
// A stamp alone cannot prove freshness when the file changed within one
// tick of the filesystem's clock before the stamp was taken: a second
// write in that tick leaves every field as it was. See Proven.
type Stamp struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MTimeNS int64  `json:"mtime_ns"`
	CTimeNS int64  `json:"ctime_ns"`
	// Version is an object's pinned version (its ETag), empty for a
	// local file: an object store gives a new version a new ETag, so a
	// stamp with one is proven whenever it was taken.
	Version string `json:"version,omitempty"`
}

// RacyWindow is how long after a file's last status change a stamp of it
// is still racy: longer than any clock tick of a filesystem dsfs reads
// (ext3 and NFSv3 servers keep whole seconds, FAT two) and than a local
// clock's usual lead over a file server's.
const RacyWindow = 2 * time.Second

// Proven reports whether s, taken at time taken, proves that every later
// file with the same stamp holds the same bytes: the file's status last
// changed at least RacyWindow before the stamp was taken. A fact derived
// from a racy stamp is derived again, from the bytes, the next time it is
// asked for (git's "racily clean" entries are treated the same way).
func (s Stamp) Proven(taken time.Time) bool {
	if s.Version != "" {
		return true
	}
	return s.CTimeNS+RacyWindow.Nanoseconds() <= taken.UnixNano()
}

// StampOf is the stamp of fi, which must come from os.Stat, os.Lstat or
// File.Stat on this platform.
func StampOf(fi os.FileInfo) Stamp {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Stamp{Size: fi.Size(), MTimeNS: fi.ModTime().UnixNano(), CTimeNS: fi.ModTime().UnixNano()}
	}
	return Stamp{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Size: st.Size, MTimeNS: st.Mtim.Nano(), CTimeNS: st.Ctim.Nano()}
}

// Stamp is the file's stamp when it was opened, and when that was: every
// byte ReadAt returns is of that version (ReadAt fails once the file
// changes).
func (f *File) Stamp() (Stamp, time.Time) {
	if f.obj != nil {
		mt := f.obj.ModTime().UnixNano()
		return Stamp{Size: f.obj.Size(), MTimeNS: mt, CTimeNS: mt, Version: f.obj.Version()}, f.opened
	}
	id := f.id
	return Stamp{Dev: id.dev, Ino: id.ino, Size: id.size, MTimeNS: id.mtime.Nano(), CTimeNS: id.ctime.Nano()}, f.opened
}

// pathCheckInterval is how long a read may rely on an earlier stat of the
// path. Every read fstats the open descriptor, which sees any change to
// the opened file's bytes, size or names: a write, a truncation or an
// extension, and a removal or a rename over it (its link count drops). The
// path is stat'd too, by the first read and then at most once an interval,
// for what leaves the opened file untouched: a directory on the way
// renamed, a symlink pointed elsewhere. Until then reads serve the opened
// file, which the fstat has just found unchanged: every byte served is of
// that one version of that one file, as it would have been had the read
// come an instant before the path changed.
const pathCheckInterval = 5 * time.Millisecond

// File is a source file opened for reading. It is safe for concurrent use.
type File struct {
	path   string
	f      *os.File
	obj    Object // instead of f, for an object of a bucket
	id     identity
	opened time.Time // the clock pathChecked counts from

	// pathChecked is when, in nanoseconds after opened, a stat of the path
	// last found it naming the opened file; -1 before the first.
	pathChecked atomic.Int64

	// changed is the first change found: once a file has changed, every
	// later read fails, even if the path is put back.
	changed atomic.Pointer[ChangedError]
	// reported is set by the first caller of FirstReport.
	reported atomic.Bool

	m mapping // View's
}

// Open opens the regular file at path and records its identity. A path
// that is not a regular file is refused without blocking (a named pipe
// would wait for a writer).
func Open(path string) (*File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if t := st.Mode & syscall.S_IFMT; t != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("not a regular file (%s)", fileType(t))}
	}
	// Reads of a regular file block whatever the flag; clear it so that
	// os.File does not try to poll the descriptor.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return newFile(path, os.NewFile(uintptr(fd), path), &st), nil
}

func newFile(path string, f *os.File, st *syscall.Stat_t) *File {
	sf := &File{path: path, f: f, id: identityOf(st), opened: time.Now()}
	sf.pathChecked.Store(-1)
	return sf
}

// FromFile takes over f, a regular file already opened at path (by a
// caller that checked where path leads), and records its identity as Open
// does. On error f is closed.
func FromFile(path string, f *os.File) (*File, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if t := st.Mode & syscall.S_IFMT; t != syscall.S_IFREG {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("not a regular file (%s)", fileType(t))}
	}
	return newFile(path, f, &st), nil
}

// Stat returns the status of the opened file (not of what its path names
// now).
func (f *File) Stat() (os.FileInfo, error) {
	if f.obj != nil {
		return ObjectInfo(f.path, f.obj.Size(), f.obj.ModTime(), false), nil
	}
	return f.f.Stat()
}

// fileType names a stat file type for a message.
func fileType(t uint32) string {
	switch t {
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFIFO:
		return "a named pipe"
	case syscall.S_IFSOCK:
		return "a socket"
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return "a device"
	}
	return fmt.Sprintf("file type %#o", t)
}

// Path is the path the file was opened by.
func (f *File) Path() string { return f.path }

// Size is the file's size when it was opened.
func (f *File) Size() int64 {
	if f.obj != nil {
		return f.obj.Size()
	}
	return f.id.size
}

// ReadAt reads len(p) bytes at off with pread, then checks that the file
// is unchanged; if it is not, it returns 0 and an error wrapping
// ErrChanged. At the end of the file it returns io.EOF, unwrapped, as
// io.ReaderAt asks.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if f.obj != nil {
		return f.obj.ReadAt(p, off)
	}
	n, err := f.f.ReadAt(p, off)
	if cerr := f.check(false); cerr != nil {
		return 0, cerr
	}
	if err != nil && err != io.EOF {
		return n, fmt.Errorf("reading %s at %d: %w", f.path, off, err)
	}
	return n, err
}

// SpliceTo moves n bytes at off into the pipe whose write end is pipe, with
// splice(2): the pipe takes references to the file's pages instead of a
// copy of them. Then it checks the file as ReadAt does; if it changed, it
// returns 0 and an error wrapping ErrChanged, and what it put in the pipe
// must not be served. A file shorter than off+n gives io.ErrUnexpectedEOF
// when it has not changed (it cannot be: its size is checked).
//
// The check covers every change made before it returns, since the file is
// compared with what it was when opened, not with the last read. A change
// after it is one the caller must look for with Check once the pipe has
// been consumed: the pipe holds the pages themselves, and a write into
// them lands in the pipe's bytes too until the reader of the pipe copies
// them.
func (f *File) SpliceTo(pipe int, off int64, n int) (int, error) {
	if ce := f.changed.Load(); ce != nil {
		return 0, ce
	}
	if f.obj != nil {
		return 0, f.notLocal("splice")
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("reading %s at %d: %w", f.path, off, err)
	}
	moved := 0
	var serr error
	// Control holds the descriptor open while the splice runs, so a
	// concurrent Close cannot hand its number to another file.
	cerr := rc.Control(func(fd uintptr) {
		for moved < n && serr == nil {
			o := off + int64(moved)
			var m int64
			m, serr = unix.Splice(int(fd), &o, pipe, nil, n-moved, 0)
			if errors.Is(serr, syscall.EINTR) {
				serr = nil
				continue
			}
			if serr == nil && m == 0 {
				serr = io.ErrUnexpectedEOF
			}
			moved += int(m)
		}
	})
	if cerr := f.check(false); cerr != nil {
		return 0, cerr
	}
	if cerr != nil {
		serr = cerr
	}
	if serr != nil {
		return moved, fmt.Errorf("splicing %s at %d: %w", f.path, off+int64(moved), serr)
	}
	return moved, nil
}

// Check returns an error wrapping ErrChanged if the file changed since it
// was opened, as a read does: a caller that handed the file's pages on
// (SpliceTo) calls it once they have been copied, to learn whether a
// change raced with the copy.
func (f *File) Check() error { return f.check(false) }

// check returns an error wrapping ErrChanged if the file is no longer the
// one opened, as it was, or its path no longer names it. It fstats the open
// descriptor; it stats the path when statPath is set, on the first check,
// and when the last stat of the path is pathCheckInterval old.
func (f *File) check(statPath bool) error {
	if ce := f.changed.Load(); ce != nil {
		return ce
	}
	if f.obj != nil {
		return nil // every read of an object checks its version
	}
	fi, err := f.f.Stat()
	if err != nil {
		return fmt.Errorf("checking %s: %w", f.path, err)
	}
	if how := f.id.differs(identityOf(fi.Sys().(*syscall.Stat_t))); how != "" {
		// The path says best what happened: removed, replaced, or
		// still there and changed.
		if phow := f.pathDiffers(); phow != "" {
			how = phow
		}
		return f.setChanged(how)
	}
	now := time.Since(f.opened).Nanoseconds()
	if last := f.pathChecked.Load(); !statPath && last >= 0 && now-last < pathCheckInterval.Nanoseconds() {
		return nil
	}
	if how := f.pathDiffers(); how != "" {
		return f.setChanged(how)
	}
	f.pathChecked.Store(now)
	return nil
}

// pathDiffers stats the path and says how what it names differs from the
// opened file, or "" if it does not.
func (f *File) pathDiffers() string {
	var st syscall.Stat_t
	if err := syscall.Stat(f.path, &st); err != nil {
		return "no longer at its path (" + err.Error() + ")"
	}
	return f.id.differs(identityOf(&st))
}

// setChanged records the first change found and returns it.
func (f *File) setChanged(how string) *ChangedError {
	f.changed.CompareAndSwap(nil, &ChangedError{File: f, How: how})
	return f.changed.Load()
}

// differs says how now differs from id, or "" if it does not.
func (id identity) differs(now identity) string {
	switch {
	case now.dev != id.dev || now.ino != id.ino:
		return fmt.Sprintf("replaced by another file (inode %d, now %d)", id.ino, now.ino)
	case now.size < id.size:
		return fmt.Sprintf("truncated from %d to %d bytes", id.size, now.size)
	case now.size > id.size:
		return fmt.Sprintf("grown from %d to %d bytes", id.size, now.size)
	case now.nlink != id.nlink:
		return fmt.Sprintf("removed, renamed over or linked anew (link count %d, now %d)", id.nlink, now.nlink)
	case now.mtime != id.mtime || now.ctime != id.ctime:
		return fmt.Sprintf("rewritten (modified %s, status changed %s; were %s and %s)",
			stamp(now.mtime), stamp(now.ctime), stamp(id.mtime), stamp(id.ctime))
	}
	return ""
}

func stamp(ts syscall.Timespec) string {
	return time.Unix(ts.Unix()).UTC().Format(time.RFC3339Nano)
}

// FirstReport reports whether this is the first call: a caller that logs
// read errors logs a file's change once, however many reads fail on it.
func (f *File) FirstReport() bool { return f.reported.CompareAndSwap(false, true) }

// Reopen opens the file's path anew and returns the descriptor if it is
// still the file opened, for the kernel to read directly (FUSE
// passthrough); otherwise it returns an error wrapping ErrChanged and the
// file fails every later read. What happens to the file after the
// descriptor is handed over is not seen: the kernel reads it without
// asking.
func (f *File) Reopen() (int, error) {
	if err := f.check(true); err != nil {
		return -1, err
	}
	if f.obj != nil {
		return -1, f.notLocal("reopen")
	}
	fd, err := syscall.Open(f.path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: f.path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, &os.PathError{Op: "fstat", Path: f.path, Err: err}
	}
	if how := f.id.differs(identityOf(&st)); how != "" {
		syscall.Close(fd)
		return -1, f.setChanged(how)
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return -1, &os.PathError{Op: "fcntl", Path: f.path, Err: err}
	}
	return fd, nil
}

// LocalFile returns f and 0: a Range of f may leave its bytes in the file
// (vfile.LocalFile). For an object it returns nil: its bytes are in no
// local file.
func (f *File) LocalFile() (*File, int64) {
	if f.obj != nil {
		return nil, 0
	}
	return f, 0
}

// Close closes the file; later reads fail. A View still reading it keeps
// its mapping until it returns.
func (f *File) Close() error {
	if f.obj != nil {
		return f.obj.Close()
	}
	f.m.close()
	return f.f.Close()
}

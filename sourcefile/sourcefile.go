// Package sourcefile reads the files of a checkpoint while making sure they
// are still the files dsfs opened. A file is identified, when opened, by its
// device, inode, size, modification time and status-change time; every read
// checks what the path names against that identity afterwards, so a file
// changed, truncated, grown, or replaced by rename under the mount gives an
// error, never bytes of two versions or of another file.
package sourcefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
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
type identity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func identityOf(st *syscall.Stat_t) identity {
	return identity{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// File is a source file opened for reading. It is safe for concurrent use.
type File struct {
	path string
	f    *os.File
	id   identity

	// changed is the first change found: once a file has changed, every
	// later read fails, even if the path is put back.
	changed atomic.Pointer[ChangedError]
	// reported is set by the first caller of FirstReport.
	reported atomic.Bool
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
	return &File{path: path, f: os.NewFile(uintptr(fd), path), id: identityOf(&st)}, nil
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
	return &File{path: path, f: f, id: identityOf(&st)}, nil
}

// Stat returns the status of the opened file (not of what its path names
// now).
func (f *File) Stat() (os.FileInfo, error) { return f.f.Stat() }

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
func (f *File) Size() int64 { return f.id.size }

// ReadAt reads len(p) bytes at off with pread, then checks that the file
// is unchanged; if it is not, it returns 0 and an error wrapping
// ErrChanged. At the end of the file it returns io.EOF, unwrapped, as
// io.ReaderAt asks.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(p, off)
	if cerr := f.Check(); cerr != nil {
		return 0, cerr
	}
	if err != nil && err != io.EOF {
		return n, fmt.Errorf("reading %s at %d: %w", f.path, off, err)
	}
	return n, err
}

// Check returns an error wrapping ErrChanged if the file at the path is no
// longer the one opened, as it was. A write, a truncation or an extension
// changes its size or status-change time; a rename over the path or a
// removal changes what the path names.
func (f *File) Check() error {
	if ce := f.changed.Load(); ce != nil {
		return ce
	}
	// One stat of the path answers both questions: while it names the
	// opened inode, its size and times are the open file's.
	var st syscall.Stat_t
	how := ""
	if err := syscall.Stat(f.path, &st); err != nil {
		how = "no longer at its path (" + err.Error() + ")"
	} else {
		how = f.id.differs(identityOf(&st))
	}
	if how == "" {
		return nil
	}
	return f.setChanged(how)
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
	if err := f.Check(); err != nil {
		return -1, err
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

// Close closes the file; later reads fail.
func (f *File) Close() error { return f.f.Close() }

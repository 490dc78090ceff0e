package sourcefile

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dsfs/dsfs/internal/scratch"
)

// mapping is a File's bytes mapped read-only into memory, made by the first
// View and unmapped once the File is closed and no View reads it. Its lock
// is never held while a View's fn runs, so a View may nest in another of
// the same file (a table and its scale in one shard).
type mapping struct {
	once   sync.Once
	mu     sync.Mutex
	data   []byte // nil if the file is not mapped, or no longer
	users  int    // Views reading data
	closed bool
}

// acquire returns the mapped bytes, counting the caller as a user until
// release, or nil if there are none or the file is closed.
func (m *mapping) acquire() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil || m.closed {
		return nil
	}
	m.users++
	return m.data
}

// release counts a user out, and unmaps the file if it was the last of a
// closed one.
func (m *mapping) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users--
	m.unmapUnused()
}

// close unmaps the file now, or once its last user is done.
func (m *mapping) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.unmapUnused()
}

// unmapUnused unmaps a closed file that no View reads; m.mu is held.
func (m *mapping) unmapUnused() {
	if m.closed && m.users == 0 && m.data != nil {
		unix.Munmap(m.data)
		m.data = nil
	}
}

// View calls fn with the n bytes of the file at off, without copying them
// out of the kernel's page cache: the first View maps the whole file into
// memory, read-only, and fn reads the mapped pages themselves. Two passes
// over the same bytes (engram-fp4/'s scale tensor, then its codes) cost the
// second one no copy and no page faults while the pages stay cached. fn
// must not keep b, which is valid only until fn returns. A file that is
// not mapped (an object of a bucket, an empty file, a mapping the kernel
// refuses) is read with ReadAt into a lent buffer (package scratch)
// instead: fn sees the same bytes either way.
//
// A file truncated under fn makes the pages fn reads past the new end
// fault. The fault is turned into View's error (debug.SetPanicOnFault),
// never a crash. After fn the file is checked as ReadAt checks it: View
// returns an error wrapping ErrChanged if the file changed, and then
// whatever fn made of b must be thrown away, since it may mix two
// versions.
func (f *File) View(off int64, n int, fn func(b []byte) error) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("reading %s: bytes [%d, %d) are not a range", f.path, off, off+int64(n))
	}
	f.m.once.Do(f.mapAll)
	data := f.m.acquire()
	if data == nil {
		return f.viewCopy(off, n, fn)
	}
	defer f.m.release()
	if off+int64(n) > int64(len(data)) {
		return f.viewCopy(off, n, fn)
	}
	err := guard(func() error { return fn(data[off : off+int64(n)]) })
	if errors.Is(err, errFault) {
		// The path says best what happened to the file.
		if cerr := f.check(true); cerr != nil {
			return cerr
		}
		return fmt.Errorf("reading %s at %d: %w", f.path, off, err)
	}
	if cerr := f.check(false); cerr != nil {
		return cerr
	}
	return err
}

// viewCopy is View for a file that is not mapped.
func (f *File) viewCopy(off int64, n int, fn func(b []byte) error) error {
	buf, b := scratch.Get(int64(n))
	defer scratch.Put(buf)
	m, err := f.ReadAt(b, off)
	switch {
	case m == n:
	case err == nil || err == io.EOF:
		return fmt.Errorf("reading %s at %d: %w", f.path, off+int64(m), io.ErrUnexpectedEOF)
	default:
		return err
	}
	return fn(b)
}

// mapAll maps the whole file, as big as it was opened, if it can.
func (f *File) mapAll() {
	if f.obj != nil || f.id.size <= 0 || f.id.size > math.MaxInt {
		return
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.closed {
		return
	}
	// Control keeps the descriptor open while it is mapped; the mapping
	// holds the file itself from then on.
	rc.Control(func(fd uintptr) {
		data, err := unix.Mmap(int(fd), 0, int(f.id.size), unix.PROT_READ, unix.MAP_SHARED)
		if err == nil {
			f.m.data = data
		}
	})
}

// errFault is wrapped by the error of a View whose fn read a page that
// faulted.
var errFault = errors.New("the mapped file faulted (truncated under the read?)")

// guard runs fn and turns a memory fault in it into an error wrapping
// errFault; any other panic goes on.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: at address %#x", errFault, f.Addr())
		}
	}()
	return fn()
}

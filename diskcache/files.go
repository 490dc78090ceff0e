package diskcache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Kept files. Besides entries, a cache directory keeps whole files: a
// caller's file (a view file read to its end) kept byte for byte, from
// offset 0, so that the kernel can read it in place of the caller (FUSE
// passthrough). Such a file cannot carry its key and digest in its bytes,
// so they are kept beside it, as an ordinary entry (the file's record:
// its length and SHA-256) under a key derived from the file's.
//
// A reader cannot check a file the kernel reads directly, so the check is
// made once, before a file is handed out: KeptFile hands out only a file
// this process wrote (KeepFile) or read whole and found matching its
// record (VerifyFile), and only while its status (device, inode, size,
// modification and change times) is still what it was then. A file
// edited, truncated, replaced or renamed over since then is checked again
// first; bit rot under an unchanged status is seen by the next process,
// not by this one. A file failing its check is logged and removed.
//
// Kept files live beside the entries (two hex digits of the key, a slash,
// the key and ".file"), count towards the cap and are evicted least
// recently used first, like entries; the shared tier (OpenShared) never
// holds them, as a bucket's object is no local file.

// keptSuffix ends the name of a kept file.
const keptSuffix = ".file"

// keptPath is where the file kept under k lives.
func (c *Cache) keptPath(k Key) string { return c.path(k) + keptSuffix }

// recordKey is the key of the entry recording the file kept under k.
func recordKey(k Key) Key {
	h := sha256.New()
	h.Write([]byte("dsfs kept file record\x00"))
	h.Write(k[:])
	return Key(h.Sum(nil))
}

// keptRecord is a kept file's record: its length and SHA-256.
type keptRecord struct {
	size int64
	sum  [sha256.Size]byte
}

func (r keptRecord) bytes() []byte {
	b := make([]byte, 8, 8+sha256.Size)
	binary.LittleEndian.PutUint64(b, uint64(r.size))
	return append(b, r.sum[:]...)
}

// fileStatus is what must not change between a kept file's check and a
// hand-out of it.
type fileStatus struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func statusOf(f *os.File) (fileStatus, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileStatus{}, err
	}
	return fileStatus{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// ErrNoLocalDir is returned by KeepFile and VerifyFile of a cache with no
// directory (a bucket alone): a kept file must be local.
var ErrNoLocalDir = errors.New("disk cache: no local directory to keep files in")

// KeptFile returns the file kept under k, open for reading, when it holds
// size bytes and this process has checked it as it is (KeepFile or
// VerifyFile); nil otherwise, and then found reports whether there is a
// file to verify. A file handed out is refreshed as a hit is.
func (c *Cache) KeptFile(k Key, size int64) (f *os.File, found bool) {
	f, st, found := c.keptFile(k, size)
	if f == nil {
		return nil, found
	}
	// Touching the file changes its status: the new one is recorded, as
	// this process made the change.
	now := time.Now()
	if os.Chtimes(f.Name(), now, now) == nil {
		if st2, err := statusOf(f); err == nil && st2.ino == st.ino {
			c.checked.Store(k, st2)
		}
	}
	c.keptHits.Add(1)
	return f, true
}

// HasKeptFile reports whether KeptFile would hand out the file kept under
// k (checked), and whether there is one at all (found), without counting
// or refreshing it.
func (c *Cache) HasKeptFile(k Key, size int64) (checked, found bool) {
	f, _, found := c.keptFile(k, size)
	if f != nil {
		f.Close()
	}
	return f != nil, found
}

// keptFile opens the file kept under k when it is as this process checked
// it, returning its status.
func (c *Cache) keptFile(k Key, size int64) (*os.File, fileStatus, bool) {
	if c.dir == "" {
		return nil, fileStatus{}, false
	}
	f, err := OpenRegular(c.keptPath(k))
	if err != nil {
		return nil, fileStatus{}, !errors.Is(err, ErrNotFound)
	}
	st, err := statusOf(f)
	checked, ok := c.checked.Load(k)
	if err != nil || st.size != size || !ok || checked.(fileStatus) != st {
		f.Close()
		return nil, fileStatus{}, true
	}
	return f, st, true
}

// KeepFile writes the size bytes r holds as the file kept under k,
// replacing any file there atomically, with its record, and evicts old
// entries if the directory has outgrown its cap. ctx ends the copy. The
// file is then handed out by KeptFile without a further check.
func (c *Cache) KeepFile(ctx context.Context, k Key, size int64, r io.ReaderAt) error {
	if c.dir == "" {
		return ErrNoLocalDir
	}
	p := c.keptPath(k)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(p), fmt.Sprintf(".tmp-%s-%d-%016x", filepath.Base(p), os.Getpid(), rand.Uint64()))
	// Private to the user dsfs runs as: a view file holds source bytes that
	// other users of the machine may not be allowed to read.
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	done := false
	defer func() {
		f.Close()
		if !done {
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	if err := copyAt(ctx, io.MultiWriter(f, h), r, size); err != nil {
		return fmt.Errorf("disk cache: keeping %s: %w", k, err)
	}
	rec := keptRecord{size: size, sum: [sha256.Size]byte(h.Sum(nil))}
	if err := os.Rename(tmp, p); err != nil {
		c.writeErrs.Add(1)
		return fmt.Errorf("disk cache: %w", err)
	}
	done = true
	// Its status is taken after the rename, which changes it.
	st, err := statusOf(f)
	if err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	c.keptWrites.Add(1)
	c.bytesWritten.Add(size)
	c.accountKept(size)
	// The record lands after the file: a reader that finds a file without
	// one, or with another's, verifies it and finds it wanting.
	hdr, tail := frame(recordKey(k), rec.bytes())
	if err := c.putLocal(recordKey(k), hdr, rec.bytes(), tail); err != nil {
		c.writeErrs.Add(1)
		return err
	}
	c.checked.Store(k, st)
	return nil
}

// VerifyFile reads the file kept under k whole and compares it with its
// record, so that KeptFile hands it out from then on. A file that does not
// match, or has no record, is logged, removed and reported as a
// *CorruptError; no file is an error wrapping ErrNotFound.
func (c *Cache) VerifyFile(ctx context.Context, k Key, size int64) error {
	if c.dir == "" {
		return ErrNoLocalDir
	}
	p := c.keptPath(k)
	f, err := OpenRegular(p)
	if err != nil {
		c.drop(err)
		return err
	}
	defer f.Close()
	st, err := statusOf(f)
	if err != nil {
		return err
	}
	fail := func(format string, a ...any) error {
		err := &CorruptError{Path: p, Reason: fmt.Sprintf(format, a...)}
		c.drop(err)
		return err
	}
	b, err := c.read(recordKey(k), nil, false)
	switch {
	case errors.Is(err, ErrNotFound):
		return fail("no record of its length and digest")
	case err != nil:
		c.drop(err)
		return fail("its record cannot be read")
	case len(b) != 8+sha256.Size:
		return fail("record of %d bytes", len(b))
	}
	want := keptRecord{size: int64(binary.LittleEndian.Uint64(b)), sum: [sha256.Size]byte(b[8:])}
	if want.size != size || st.size != size {
		return fail("%d bytes, recorded as %d, where %d are expected", st.size, want.size, size)
	}
	h := sha256.New()
	if err := copyAt(ctx, h, f, size); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fail("reading it: %v", err)
	}
	if got := [sha256.Size]byte(h.Sum(nil)); got != want.sum {
		return fail("sha256 %x does not match its record (%x): edited or damaged", got[:8], want.sum[:8])
	}
	c.checked.Store(k, st)
	c.keptVerified.Add(1)
	return nil
}

// copyAt copies the n bytes of r to w, 4 MiB at a time, checking ctx
// between reads.
func copyAt(ctx context.Context, w io.Writer, r io.ReaderAt, n int64) error {
	buf := make([]byte, min(n, 4<<20))
	for off := int64(0); off < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := buf[:min(int64(len(buf)), n-off)]
		m, err := r.ReadAt(p, off)
		if m < len(p) {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("%d bytes where %d were expected: %w", off+int64(m), n, io.ErrUnexpectedEOF)
			}
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		off += int64(m)
	}
	return nil
}

// isKeptName reports whether name is a kept file's.
func isKeptName(name string) bool {
	base, ok := strings.CutSuffix(name, keptSuffix)
	return ok && isHex(base, 2*len(Key{}))
}

// accountKept counts a kept file of n bytes written, as putLocal counts
// an entry.
func (c *Cache) accountKept(n int64) {
	c.entries.Add(1)
	c.size.Add(n)
	if c.sinceScan.Add(n) >= c.scanEvery() || !c.scanned.Load() {
		c.scan()
	}
}

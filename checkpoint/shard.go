package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/sourcefile"
	"golang.org/x/sync/semaphore"
)

// openShard opens and validates the shard name (slash-separated, relative
// to Dir) with openFile. The file stays open in the returned Shard.
func (c *Catalog) openShard(name string, parsing *semaphore.Weighted) (_ *Shard, err error) {
	f, err := c.openFile(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Headers in the decoder cost a few times their length: take the
	// length (the reader checks it) from the budget of headers in flight.
	// The header is read once and kept: from a bucket, just its bytes are
	// fetched (ReadOnceAt), not the chunks around them.
	var n [8]byte
	r := f.Once()
	if _, err := f.ReadOnceAt(n[:], 0); err == nil {
		w := int64(min(binary.LittleEndian.Uint64(n[:]), maxParsing))
		parsing.Acquire(context.Background(), w)
		defer parsing.Release(w)
		r = knownPrefix{n[:], r} // the parser reads the length again: from a bucket, a GET
	}
	h, err := safetensors.ReadHeaderLimit(r, f.Size(), MaxTensors)
	if err != nil {
		return nil, err
	}
	return &Shard{Name: name, Path: f.Path(), Size: f.Size(), ModTime: fi.ModTime(), DataStart: h.DataStart, header: h, f: f, id: idOf(fi)}, nil
}

// knownPrefix reads like r, answering a read of its first bytes, which
// were read already, from head.
type knownPrefix struct {
	head []byte
	r    io.ReaderAt
}

func (k knownPrefix) ReadAt(p []byte, off int64) (int, error) {
	if off == 0 && len(p) <= len(k.head) {
		return copy(p, k.head), nil
	}
	return k.r.ReadAt(p, off)
}

func notRegular(fi os.FileInfo) error {
	return fmt.Errorf("not a regular file (mode %s)", fi.Mode().Type())
}

// ReadAt reads len(p) bytes at offset off of the shard file with pread, so
// a file truncated under the mount gives an error, never a fault. After
// reading it checks that the file is still the one opened, unchanged
// (sourcefile.File.ReadAt); if not it returns 0 and an error wrapping
// sourcefile.ErrChanged, since the bytes may mix two versions. At the end
// of the file it returns io.EOF, unwrapped, as io.ReaderAt asks. It is
// safe for concurrent use.
func (s *Shard) ReadAt(p []byte, off int64) (int, error) {
	return s.f.ReadAt(p, off)
}

// Stamp is the shard file's version as it was opened, and when it was
// opened (sourcefile.File.Stamp): the key of any fact derived from its
// bytes.
func (s *Shard) Stamp() (sourcefile.Stamp, time.Time) { return s.f.Stamp() }

// ReadAt reads bytes [off, off+len(p)) of the tensor's data, which must lie
// within the tensor. It reads all of p or fails; errors name the shard and
// the tensor.
func (t *Tensor) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > t.Size || int64(len(p)) > t.Size-off {
		return 0, fmt.Errorf("%s: tensor %s: bytes [%d, %d) are outside its %d", t.Shard.Name, t.Name, off, off+int64(len(p)), t.Size)
	}
	n, err := t.Shard.ReadAt(p, t.Offset+off)
	if n == len(p) {
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, fmt.Errorf("%s: tensor %s: %w", t.Shard.Name, t.Name, err)
}

// View calls fn with bytes [off, off+n) of the tensor's data, which must
// lie within the tensor, as they are in the kernel's page cache, without a
// copy (sourcefile.File.View): fn must not keep them. An error of fn is
// View's; an error of the file (a change, a fault, a short read) names the
// shard and the tensor, and then what fn made of the bytes must be thrown
// away.
func (t *Tensor) View(off, n int64, fn func(b []byte) error) error {
	if off < 0 || n < 0 || off > t.Size || n > t.Size-off {
		return fmt.Errorf("%s: tensor %s: bytes [%d, %d) are outside its %d", t.Shard.Name, t.Name, off, off+n, t.Size)
	}
	var fnErr error
	err := t.Shard.f.View(t.Offset+off, int(n), func(b []byte) error {
		fnErr = fn(b)
		return fnErr
	})
	if err != nil && err != fnErr {
		return fmt.Errorf("%s: tensor %s: %w", t.Shard.Name, t.Name, err)
	}
	return err
}

// LocalFile returns the shard's file and 0: a Range of the shard may leave
// its bytes in the file (vfile.LocalFile).
func (s *Shard) LocalFile() (*sourcefile.File, int64) { return s.f.LocalFile() }

// LocalFile returns the shard's file and the offset of the tensor's data
// in it: a Range of the tensor may leave its bytes in the file
// (vfile.LocalFile).
func (t *Tensor) LocalFile() (*sourcefile.File, int64) {
	f, _ := t.Shard.f.LocalFile()
	return f, t.Offset
}

// File is the shard's open source file, for callers that check it (the
// mount, before it lets the kernel read the file directly).
func (s *Shard) File() *sourcefile.File { return s.f }

// Close closes the shard file; later reads fail.
func (s *Shard) Close() error {
	return s.f.Close()
}

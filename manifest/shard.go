package manifest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dsfs/dsfs/safetensors"
	"golang.org/x/sync/semaphore"
)

// ErrChanged is wrapped by the errors of Shard.ReadAt when the file's size
// or modification time differs from what Open recorded: the bytes may mix
// two versions, so none are returned.
var ErrChanged = errors.New("source file changed since it was opened")

// openShard opens and validates the shard name (slash-separated, relative
// to dir), which must resolve inside rs. The file stays open in the
// returned Shard.
func openShard(rs roots, dir, name string, parsing *semaphore.Weighted) (_ *Shard, err error) {
	p := filepath.Join(dir, filepath.FromSlash(name))
	f, fi, err := rs.open(p)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	// Headers in the decoder cost a few times their length: take the
	// length (the reader checks it) from the budget of headers in flight.
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err == nil {
		w := int64(min(binary.LittleEndian.Uint64(n[:]), maxParsing))
		parsing.Acquire(context.Background(), w)
		defer parsing.Release(w)
	}
	h, err := safetensors.ReadHeaderLimit(f, fi.Size(), MaxTensors)
	if err != nil {
		return nil, err
	}
	return &Shard{Name: name, Path: p, Size: fi.Size(), ModTime: fi.ModTime(), Header: h, f: f, id: idOf(fi)}, nil
}

func notRegular(fi os.FileInfo) error {
	return fmt.Errorf("not a regular file (mode %s)", fi.Mode().Type())
}

// ReadAt reads len(p) bytes at offset off of the shard file with pread, so
// a file truncated under the mount gives an error, never a fault. After
// reading it checks that the file's size and modification time are still
// those recorded at open; if not it returns 0 and an error wrapping
// ErrChanged. At the end of the file it returns io.EOF, unwrapped, as
// io.ReaderAt asks. It is safe for concurrent use.
func (s *Shard) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.f.ReadAt(p, off)
	if cerr := s.unchanged(); cerr != nil {
		return 0, cerr
	}
	if err != nil && err != io.EOF {
		return n, fmt.Errorf("reading %s at %d: %w", s.Path, off, err)
	}
	return n, err
}

// unchanged compares the file's fstat with the values recorded at open.
func (s *Shard) unchanged() error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("checking %s: %w", s.Path, err)
	}
	if fi.Size() != s.Size || !fi.ModTime().Equal(s.ModTime) {
		return fmt.Errorf("%s: %w (was %d bytes modified %s, now %d bytes modified %s)",
			s.Path, ErrChanged, s.Size, s.ModTime.Format(time.RFC3339Nano), fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
	}
	return nil
}

// Close closes the shard file; later reads fail.
func (s *Shard) Close() error {
	return s.f.Close()
}

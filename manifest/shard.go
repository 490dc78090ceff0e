package manifest

import (
	"path/filepath"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/sourcefile"
)

// ErrChanged is wrapped by the errors of Shard.ReadAt when the file changed
// since it was opened (sourcefile.ErrChanged): the bytes may mix two
// versions, so none are returned.
var ErrChanged = sourcefile.ErrChanged

// openShard opens and validates the shard name (slash-separated, relative
// to dir). The file stays open in the returned Shard.
func openShard(dir, name string) (_ *Shard, err error) {
	p := filepath.Join(dir, filepath.FromSlash(name))
	f, err := sourcefile.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	h, err := safetensors.ReadHeader(f, f.Size())
	if err != nil {
		return nil, err
	}
	return &Shard{Name: name, Path: p, Size: f.Size(), ModTime: f.ModTime(), Header: h, f: f}, nil
}

// ReadAt reads len(p) bytes at offset off of the shard file with pread, so
// a file truncated under the mount gives an error, never a fault. After
// reading it checks that the file is still the one opened, unchanged
// (sourcefile.File.ReadAt); if not it returns 0 and an error wrapping
// ErrChanged. At the end of the file it returns io.EOF, unwrapped, as
// io.ReaderAt asks. It is safe for concurrent use.
func (s *Shard) ReadAt(p []byte, off int64) (int, error) {
	return s.f.ReadAt(p, off)
}

// File is the shard's open source file, for callers that check it (the
// mount, before it lets the kernel read the file directly).
func (s *Shard) File() *sourcefile.File { return s.f }

// Close closes the shard file; later reads fail.
func (s *Shard) Close() error {
	return s.f.Close()
}

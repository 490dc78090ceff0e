package sourcefile

import (
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Object is a source file kept elsewhere than in a local file system: an
// object of a bucket, opened as one version of it (package objstore).
type Object interface {
	// ReadAt reads the pinned version's bytes at off. Once that version
	// is gone (the object was replaced or deleted) it fails with an error
	// wrapping ErrChanged, so no read ever mixes two versions. At the end
	// it returns io.EOF, as io.ReaderAt asks.
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
	// Version is the pinned version (the object's ETag or version id).
	Version() string
	ModTime() time.Time
	Close() error
}

// FromObject makes a File of o, which path names in messages
// (s3://BUCKET/KEY). Its stamp is the object's version; it is never local.
func FromObject(path string, o Object) *File {
	f := &File{path: path, obj: o, opened: time.Now()}
	f.pathChecked.Store(-1)
	return f
}

// ReadOnceAt reads like ReadAt bytes the caller reads once and keeps (a
// header, a config file): an object that can (objstore's) fetches just
// those bytes instead of the chunks of its cache around them.
func (f *File) ReadOnceAt(p []byte, off int64) (int, error) {
	if o, ok := f.obj.(interface {
		ReadOnceAt(p []byte, off int64) (int, error)
	}); ok {
		return o.ReadOnceAt(p, off)
	}
	return f.ReadAt(p, off)
}

// Once is f as an io.ReaderAt that reads with ReadOnceAt.
func (f *File) Once() io.ReaderAt { return once{f} }

type once struct{ f *File }

func (r once) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadOnceAt(p, off) }

// Local reports whether the file is a local file with a descriptor, whose
// pages can be spliced and which the kernel can read directly.
func (f *File) Local() bool { return f.obj == nil }

func (f *File) notLocal(op string) error {
	return &os.PathError{Op: op, Path: f.path, Err: errNotLocal}
}

var errNotLocal = syscall.EOPNOTSUPP

// ObjectInfo is the status of an object, or of a folder of a bucket
// when dir is set: readable (and, for a folder, searchable) by its owner,
// who is whoever runs dsfs, since the object store's credentials are
// theirs. Its Sys is a stat_t with those fields, for code that asks
// stat's fields of any source file.
func ObjectInfo(name string, size int64, mtime time.Time, dir bool) fs.FileInfo {
	return objectInfo{name: name, size: size, mtime: mtime, dir: dir}
}

type objectInfo struct {
	name  string
	size  int64
	mtime time.Time
	dir   bool
}

func (i objectInfo) Name() string       { return i.name }
func (i objectInfo) Size() int64        { return i.size }
func (i objectInfo) ModTime() time.Time { return i.mtime }
func (i objectInfo) IsDir() bool        { return i.dir }

func (i objectInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o500
	}
	return 0o400
}

func (i objectInfo) Sys() any {
	mode := uint32(syscall.S_IFREG | 0o400)
	if i.dir {
		mode = syscall.S_IFDIR | 0o500
	}
	mt := syscall.NsecToTimespec(i.mtime.UnixNano())
	return &syscall.Stat_t{Mode: mode, Size: i.size, Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Mtim: mt, Ctim: mt, Nlink: 1}
}

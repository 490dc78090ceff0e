// Command memfs is the baseline of dsfs's read benchmarks: it mounts files
// held in memory with exactly the FUSE options, timeouts and open flags of a
// dsfs mount, so that a read through dsfs can be compared with the fastest a
// go-fuse server can answer the same requests.
//
// Usage:
//
//	memfs MNT NAME=PATH...
//
// Each PATH is read into memory whole and served read-only as MNT/NAME. A
// file appears once the mount is ready. SIGINT or SIGTERM unmounts.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/vfs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// immutable is the entry and attribute timeout dsfs gives its files.
const immutable = 24 * time.Hour

func main() {
	log.SetFlags(0)
	log.SetPrefix("memfs: ")
	if len(os.Args) < 3 {
		log.Fatal("usage: memfs MNT NAME=PATH...")
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		log.Fatal(err)
	}
}

func run(mnt string, specs []string) error {
	start := time.Now()
	root := &dirNode{files: make(map[string]*fileNode), start: start}
	for _, s := range specs {
		name, path, ok := strings.Cut(s, "=")
		if !ok || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("%q: want NAME=PATH with a plain file name", s)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		root.files[name] = &fileNode{data: data, start: start}
	}
	entry, neg := immutable, time.Second
	server, err := fs.Mount(mnt, root, &fs.Options{
		EntryTimeout:    &entry,
		NegativeTimeout: &neg,
		MountOptions:    vfs.MountOptions(false, false),
	})
	if err != nil {
		return fmt.Errorf("mounting %s: %w", mnt, err)
	}
	if err := vfs.RaiseReadAhead(mnt); err != nil {
		log.Printf("read-ahead stays at the kernel default: %v", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		if err := server.Unmount(); err != nil {
			log.Printf("unmounting %s: %v", filepath.Clean(mnt), err)
		}
	}()
	server.Wait()
	return nil
}

// dirNode is the mount's root: the in-memory files, added when the kernel
// first sees the root, as dsfs builds its whole tree at mount.
type dirNode struct {
	fs.Inode
	files map[string]*fileNode
	start time.Time
}

var _ = (fs.NodeOnAdder)((*dirNode)(nil))
var _ = (fs.NodeGetattrer)((*dirNode)(nil))

func (d *dirNode) OnAdd(ctx context.Context) {
	for name, f := range d.files {
		d.AddChild(name, d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o555
	out.SetTimes(nil, &d.start, &d.start)
	out.SetTimeout(immutable)
	return 0
}

// fileNode serves bytes held in memory, with the attributes and open flags
// of a dsfs file.
type fileNode struct {
	fs.Inode
	data  []byte
	start time.Time
}

var _ = (fs.NodeGetattrer)((*fileNode)(nil))
var _ = (fs.NodeOpener)((*fileNode)(nil))
var _ = (fs.NodeReader)((*fileNode)(nil))

func (f *fileNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	out.Size = uint64(len(f.data))
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.SetTimes(nil, &f.start, &f.start)
	out.SetTimeout(immutable)
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

// Read hands go-fuse a slice of the data: no copy, the least work a
// server can do per request. It is a vector, which go-fuse writes to
// /dev/fuse with one writev and, unlike a data result, never tries to
// splice (dsfs's mount options leave splicing on).
func (f *fileNode) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(f.data)) {
		return fuse.ReadResultVector(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(f.data)))
	return fuse.ReadResultVector([][]byte{f.data[off:end]}), 0
}

package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// errOutside is the reason a file is left out when a symbolic link on its
// path leads out of the checkpoint: served through the mount it would give
// every reader of the mount a file of the mounting user's choosing (or of
// whoever can write the checkpoint directory), /etc/shadow included.
var errOutside = errors.New("a symbolic link on its path leads outside the checkpoint directory; left out")

// roots are the real directories the checkpoint's files may resolve into:
// the checkpoint directory and, for a Hugging Face cache snapshot
// (.../models--ORG--NAME/snapshots/REV), that repository's blobs folder,
// where every file of a snapshot links.
type roots []string

// sourceRoots returns the roots of the checkpoint directory dir.
func sourceRoots(dir string) (roots, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	rs := roots{real}
	snapshots := filepath.Dir(real)
	repo := filepath.Dir(snapshots)
	if filepath.Base(snapshots) == "snapshots" && strings.HasPrefix(filepath.Base(repo), "models--") {
		if blobs, err := filepath.EvalSymlinks(filepath.Join(repo, "blobs")); err == nil {
			rs = append(rs, blobs)
		}
	}
	return rs, nil
}

// contain says whether the real path p lies inside one of the roots.
func (rs roots) contain(p string) bool {
	for _, r := range rs {
		rel, err := filepath.Rel(r, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// open opens the regular file at p after checking that it resolves inside
// the roots, and checks again on the opened descriptor: the kernel's name
// for the file it opened (/proc/self/fd) must lie inside too, so a link
// swapped between the check and the open is caught. A path that is not a
// regular file is never opened (a FIFO would block).
func (rs roots) open(p string) (*os.File, fs.FileInfo, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, nil, err
	}
	if !rs.contain(real) {
		return nil, nil, errOutside
	}
	if fi, err := os.Stat(real); err != nil {
		return nil, nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, nil, notRegular(fi)
	}
	// O_NONBLOCK: a FIFO swapped in after the stat opens without waiting
	// (and is refused below); regular files ignore the flag.
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(fi)
	}
	if err == nil {
		err = rs.checkOpened(f, real)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// checkOpened checks where the opened file f lives: by the kernel's name
// for it where /proc is mounted, else by comparing it with what real names
// now.
func (rs roots) checkOpened(f *os.File, real string) error {
	if name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); err == nil {
		if !rs.contain(name) {
			return errOutside
		}
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(real)
	if err != nil || !os.SameFile(fi, now) {
		return fmt.Errorf("%w (replaced while it was opened)", errOutside)
	}
	return nil
}

// fileID identifies a file by device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{uint64(st.Dev), st.Ino}
}

// CheckOpened returns an error unless f, opened at p, is the file the
// catalog checked at p (a shard's Path or a File's Path): whoever opens a
// catalogued path again must call it, or a symbolic link swapped in after
// Open could serve a file from outside the checkpoint.
func (c *Catalog) CheckOpened(p string, f interface{ Stat() (os.FileInfo, error) }) error {
	want, ok := c.ids[p]
	if !ok {
		return fmt.Errorf("%s: not a file of the catalog", p)
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if idOf(fi) != want {
		return fmt.Errorf("%s: replaced since the checkpoint was opened (another file now answers to its name); not served", p)
	}
	return nil
}

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/views"
	"golang.org/x/sys/unix"
)

func runExport(args []string) error {
	fs := flags("export")
	cacheMB := fs.Int("cache-mb", 256, "memory budget of the block cache, MiB")
	qf := addQ2Flags(fs)
	vf := addViewFlags(fs)
	pos, err := parse(fs, args, 3, 3)
	if err != nil {
		return err
	}
	viewName, srcDir, out := pos[0], pos[1], pos[2]
	if !slices.Contains(views.Names(), viewName) {
		return usagef("unknown view %q (have %s)", viewName, strings.Join(views.Names(), ", "))
	}
	if err := checkOutside(out, srcDir); err != nil {
		return err
	}
	opt := views.Options{Views: []string{viewName}}
	if err := qf.apply(&opt); err != nil {
		return err
	}
	defer qf.close() // after the views and caches that write to it, deferred below
	vf.apply(&opt)
	cache := blockcache.New(int64(*cacheMB)<<20, runtime.NumCPU())
	opt.Cache = cache
	src, err := openSource(srcDir, opt)
	if err != nil {
		cache.Close()
		return err
	}
	defer src.Close()
	defer cache.Close() // computations stop before the sources close
	if err := checkOutside(out, src.cat.Dir); err != nil {
		return err
	}
	prog, err := program()
	if err != nil {
		return err
	}
	id, err := views.Identity(prog, viewName, opt, src.cat)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	r, err := exportView(ctx, src.set.Root.Child(viewName), cache, out, id)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted after %d files; no partial file is left under a real name, and a rerun completes the export", r.written)
		}
		return err
	}
	fmt.Printf("exported %s to %s: %d files written, %d already complete\n", viewName, out, r.written, r.skipped)
	return nil
}

// checkOutside refuses an export directory that is src or lies inside it
// (through any symbolic link or bind mount: directories are compared by
// device and inode), since exporting would write into the checkpoint.
func checkOutside(out, src string) error {
	sfi, err := os.Stat(src)
	if err != nil {
		return nil // opening the source says what is wrong with it
	}
	dir, err := resolveExisting(out)
	if err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && os.SameFile(fi, sfi) {
			if d == dir {
				return fmt.Errorf("%s is the source checkpoint %s; export into another directory", out, src)
			}
			return fmt.Errorf("%s is inside the source checkpoint %s; export into a directory outside it", out, src)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// resolveExisting returns the absolute path of p with the symbolic links
// of its longest existing prefix resolved.
func resolveExisting(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for d := abs; ; d = filepath.Dir(d) {
		r, err := filepath.EvalSymlinks(d)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, os.ErrNotExist) || d == filepath.Dir(d) {
			return "", err
		}
		rest = append([]string{filepath.Base(d)}, rest...)
	}
}

// exportXattr is the extended attribute that marks a file dsfs export
// wrote, recording the export's identity and the file's size and SHA-256.
const exportXattr = "user.dsfs.export"

// tmpSuffix ends the name a file is written under until it is complete.
const tmpSuffix = ".dsfs-tmp"

// exportRecord is the content of exportXattr.
type exportRecord struct {
	identity string
	size     int64
	sha256   string
}

func (r exportRecord) String() string {
	return fmt.Sprintf("dsfs-export 1 %s %d %s", r.identity, r.size, r.sha256)
}

func parseRecord(s string) (exportRecord, bool) {
	f := strings.Fields(s)
	if len(f) != 5 || f[0] != "dsfs-export" || f[1] != "1" {
		return exportRecord{}, false
	}
	size, err := strconv.ParseInt(f[3], 10, 64)
	return exportRecord{identity: f[2], size: size, sha256: f[4]}, err == nil
}

// exportResult counts the files of an export.
type exportResult struct{ written, skipped int }

// export writes every file of a view tree below out as exportView does,
// for a fresh directory.
func export(ctx context.Context, view *vfile.Node, cache vfile.Cache, out string) (int, error) {
	r, err := exportView(ctx, view, cache, out, "")
	return r.written + r.skipped, err
}

// exportFile is one file of the view and what the export does with it.
type exportFile struct {
	path string // slash-separated, relative to the export directory
	node *vfile.Node
	// ours is set when a file of that name exists and dsfs export wrote it
	// (it may be replaced); verify when its record matches this export and
	// only its bytes remain to be checked.
	ours, verify bool
	rec          exportRecord
}

// exportView writes every file of a view tree below out, reading it
// exactly as the mount does (vfile.Reader over the block cache). It never
// writes through a symbolic link and never replaces a file it did not
// write: it refuses before writing anything when a name it would write is
// a link, or a file without its record. Each file is written to a
// temporary name in its directory, synced, marked with its record
// (exportXattr) and renamed into place, so an interruption leaves no
// partial file under a real name. A file whose record matches this export
// and whose bytes still hash to the recorded digest is kept; any other file
// it wrote before is rewritten.
func exportView(ctx context.Context, view *vfile.Node, cache vfile.Cache, out, identity string) (exportResult, error) {
	var res exportResult
	if err := os.MkdirAll(out, 0o755); err != nil {
		return res, err
	}
	root, err := unix.Open(out, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, &os.PathError{Op: "open", Path: out, Err: err}
	}
	dirs := &exportDirs{out: out, fds: map[string]int{"": root}}
	defer dirs.close()
	if err := unix.Flock(root, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return res, fmt.Errorf("%s: another dsfs export is writing there", out)
	} else if err != nil {
		return res, &os.PathError{Op: "flock", Path: out, Err: err}
	}
	if err := refuseSnapshot(out); err != nil {
		return res, err
	}
	files, err := planExport(view, dirs, identity)
	if err != nil {
		return res, err
	}
	if err := dirs.removeStale(); err != nil {
		return res, err
	}
	var verifyBytes, writeBytes int64
	for _, f := range files {
		if f.verify {
			verifyBytes += f.rec.size
		}
		if f.node.File != nil {
			writeBytes += f.node.File.Size()
		}
	}
	if err := verifyExisting(ctx, dirs, files, verifyBytes, &res, &writeBytes); err != nil {
		return res, err
	}
	bar := newProgress("exporting", "")
	defer bar.finish()
	var done int64 // may pass writeBytes: documents' sizes are known once computed
	var warned bool
	for _, f := range files {
		if f.node == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := dirs.write(ctx, f, cache, identity, &warned, func(n int64) { done += n; bar.set(done, max(done, writeBytes)) }); err != nil {
			return res, err
		}
		res.written++
	}
	return res, nil
}

// verifyExisting hashes the files a previous run of the same export
// finished and marks those whose bytes still match their record as kept
// (node nil), taking their size off writeBytes.
func verifyExisting(ctx context.Context, dirs *exportDirs, files []exportFile, total int64, res *exportResult, writeBytes *int64) error {
	if total == 0 {
		return nil
	}
	bar := newProgress("verifying", "")
	defer bar.finish()
	var done int64
	for i, f := range files {
		if !f.verify {
			continue
		}
		ok, err := dirs.matches(ctx, f, func(n int64) { done += n; bar.set(done, total) })
		if err != nil {
			return err
		}
		if ok {
			files[i].node = nil // complete: nothing to write
			res.skipped++
			if f.node.File != nil {
				*writeBytes -= f.node.File.Size()
			}
		}
	}
	return nil
}

// refuseSnapshot refuses an export directory that holds symbolic links
// into blobs/: a Hugging Face cache snapshot, whose files are shared blobs.
func refuseSnapshot(out string) error {
	ents, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		if target, err := os.Readlink(filepath.Join(out, e.Name())); err == nil && slices.Contains(strings.Split(filepath.ToSlash(target), "/"), "blobs") {
			return fmt.Errorf("%s looks like a Hugging Face snapshot (%s links to %s); export into a directory of its own", out, e.Name(), target)
		}
	}
	return nil
}

// planExport walks the view and checks every name it would write: a
// directory must be a real directory or absent; a file must be absent or a
// regular file that dsfs export wrote. Every refusal comes before anything
// is written.
func planExport(view *vfile.Node, dirs *exportDirs, identity string) ([]exportFile, error) {
	var files []exportFile
	var refused []string
	absent := make(map[string]bool)     // directories not there yet
	refusedDir := make(map[string]bool) // directories not looked into
	err := view.Walk(func(p string, n *vfile.Node) error {
		if p == "" {
			return nil
		}
		if refusedDir[path.Dir(p)] {
			refusedDir[p] = true
			return nil
		}
		if absent[path.Dir(p)] {
			absent[p] = n.IsDir()
			if !n.IsDir() {
				files = append(files, exportFile{path: p, node: n})
			}
			return nil
		}
		var st unix.Stat_t
		err := unix.Fstatat(dirs.fds[""], p, &st, unix.AT_SYMLINK_NOFOLLOW)
		full := filepath.Join(dirs.out, filepath.FromSlash(p))
		switch {
		case errors.Is(err, unix.ENOENT):
			absent[p] = n.IsDir()
			if !n.IsDir() {
				files = append(files, exportFile{path: p, node: n})
			}
			return nil
		case err != nil:
			return &os.PathError{Op: "lstat", Path: full, Err: err}
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			refusedDir[p] = true
			target, _ := os.Readlink(full)
			refused = append(refused, fmt.Sprintf("%s is a symbolic link (to %s), and dsfs export never writes through links", full, target))
		case n.IsDir() && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			refusedDir[p] = true
			refused = append(refused, full+" is not a directory")
		case n.IsDir():
			dirs.existing = append(dirs.existing, p)
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			refused = append(refused, full+" is not a regular file")
		default:
			rec, ok, err := readRecord(full)
			if err != nil {
				return err
			}
			if !ok {
				refused = append(refused, full+" exists and was not written by dsfs export; dsfs export replaces only its own files")
				return nil
			}
			files = append(files, exportFile{path: p, node: n, ours: true,
				verify: rec.identity == identity && rec.size == st.Size, rec: rec})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch len(refused) {
	case 0:
		return files, nil
	case 1:
		return nil, errors.New(refused[0])
	}
	return nil, fmt.Errorf("%s (and %d more)", refused[0], len(refused)-1)
}

// readRecord reads the export record of the file at p, not following a
// link; ok is false when it has none.
func readRecord(p string) (rec exportRecord, ok bool, err error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, exportXattr, buf)
	switch {
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.ERANGE):
		return rec, false, nil
	case err != nil:
		return rec, false, &os.PathError{Op: "getxattr", Path: p, Err: err}
	}
	rec, ok = parseRecord(string(buf[:n]))
	return rec, ok, nil
}

// exportDirs holds the directories of an export open, each opened from its
// parent without following links, so that no path is resolved through a
// link swapped in after planExport looked.
type exportDirs struct {
	out      string
	fds      map[string]int // by slash-separated path; "" is out
	existing []string       // directories of the view that were there before
}

func (d *exportDirs) close() {
	for _, fd := range d.fds {
		unix.Close(fd)
	}
}

// open returns the descriptor of directory p, creating it if it is absent.
func (d *exportDirs) open(p string) (int, error) {
	if p == "." {
		p = ""
	}
	if fd, ok := d.fds[p]; ok {
		return fd, nil
	}
	parent, err := d.open(path.Dir(p))
	if err != nil {
		return -1, err
	}
	name := path.Base(p)
	full := filepath.Join(d.out, filepath.FromSlash(p))
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, name, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, &os.PathError{Op: "mkdir", Path: full, Err: err}
		}
		fd, err = unix.Openat(parent, name, flags, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, fmt.Errorf("%s is not a directory (a symbolic link?); dsfs export writes only into real directories", full)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: full, Err: err}
	}
	d.fds[p] = fd
	return fd, nil
}

// removeStale removes the temporary files an interrupted export left in
// the view's directories.
func (d *exportDirs) removeStale() error {
	for _, p := range append([]string{""}, d.existing...) {
		fd, err := d.open(p)
		if err != nil {
			return err
		}
		ents, err := os.ReadDir(filepath.Join(d.out, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		for _, e := range ents {
			if name := e.Name(); e.Type().IsRegular() && strings.HasPrefix(name, ".") && strings.HasSuffix(name, tmpSuffix) {
				if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
					return &os.PathError{Op: "remove", Path: filepath.Join(d.out, filepath.FromSlash(p), name), Err: err}
				}
			}
		}
	}
	return nil
}

// matches reports whether the existing file f still holds the bytes its
// record names: hashing the file costs a read of it, where recomputing a
// derived view (q2/ quantises) costs far more, and the digest was taken
// of the view's bytes as they were written.
func (d *exportDirs) matches(ctx context.Context, f exportFile, progress func(int64)) (bool, error) {
	dfd, err := d.open(path.Dir(f.path))
	if err != nil {
		return false, err
	}
	full := filepath.Join(d.out, filepath.FromSlash(f.path))
	fd, err := unix.Openat(dfd, path.Base(f.path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: full, Err: err}
	}
	file := os.NewFile(uintptr(fd), full)
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return false, err
	}
	sum, err := vfile.SHA256(ctx, progressReader{file, progress}, 0, fi.Size())
	if err != nil {
		return false, fmt.Errorf("%s: %w", full, err)
	}
	return fi.Size() == f.rec.size && sum == f.rec.sha256, nil
}

// progressReader reports the bytes each read returns.
type progressReader struct {
	r        io.ReaderAt
	progress func(int64)
}

func (p progressReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := p.r.ReadAt(b, off)
	p.progress(int64(n))
	return n, err
}

// write writes file f under a temporary name, then renames it into place.
func (d *exportDirs) write(ctx context.Context, f exportFile, cache vfile.Cache, identity string, warned *bool, progress func(int64)) error {
	dfd, err := d.open(path.Dir(f.path))
	if err != nil {
		return err
	}
	name := path.Base(f.path)
	tmp := "." + name + tmpSuffix
	full := filepath.Join(d.out, filepath.FromSlash(f.path))
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: filepath.Join(filepath.Dir(full), tmp), Err: err}
	}
	file := os.NewFile(uintptr(fd), filepath.Join(filepath.Dir(full), tmp))
	keep := false
	defer func() {
		if !keep {
			file.Close()
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	h := sha256.New()
	size, err := writeNode(ctx, io.MultiWriter(file, h), f.node, cache, progress)
	if err != nil {
		return fmt.Errorf("%s: %w", full, err)
	}
	rec := exportRecord{identity: identity, size: size, sha256: hex.EncodeToString(h.Sum(nil))}
	if err := unix.Fsetxattr(fd, exportXattr, []byte(rec.String()), 0); err != nil {
		if !errors.Is(err, unix.ENOTSUP) {
			return &os.PathError{Op: "setxattr", Path: file.Name(), Err: err}
		}
		if !*warned {
			*warned = true
			slog.Warn("the export directory keeps no user extended attributes: a rerun cannot tell these files are complete and will refuse to replace them", "dir", d.out)
		}
	}
	if err := file.Sync(); err != nil {
		return fmt.Errorf("%s: %w", file.Name(), err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("%s: %w", file.Name(), err)
	}
	keep = true
	if err := rename(dfd, tmp, name, f.ours); err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: full, Err: err}
	}
	if err := unix.Fsync(dfd); err != nil {
		return &os.PathError{Op: "fsync", Path: filepath.Dir(full), Err: err}
	}
	return nil
}

// rename moves tmp to name in directory dfd. A name that was absent when
// the export looked must still be: a file that appeared since is not
// replaced.
func rename(dfd int, tmp, name string, replace bool) error {
	if replace {
		return unix.Renameat(dfd, tmp, dfd, name)
	}
	err := unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) { // a filesystem without RENAME_NOREPLACE
		if err := unix.Fstatat(dfd, name, new(unix.Stat_t), unix.AT_SYMLINK_NOFOLLOW); err == nil {
			return unix.EEXIST
		}
		return unix.Renameat(dfd, tmp, dfd, name)
	}
	return err
}

// writeNode writes a view file's bytes to w and returns how many.
func writeNode(ctx context.Context, w io.Writer, n *vfile.Node, cache vfile.Cache, progress func(int64)) (int64, error) {
	if n.File == nil {
		b, err := n.Doc.Bytes(ctx)
		if err != nil {
			return 0, err
		}
		if _, err := w.Write(b); err != nil {
			return 0, err
		}
		progress(int64(len(b)))
		return int64(len(b)), nil
	}
	bw := bufio.NewWriterSize(w, 4<<20)
	size := n.File.Size()
	r := vfile.NewReader(n.File, cache)
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return off, err
		}
		k, err := r.ReadAtContext(ctx, buf[:min(int64(len(buf)), size-off)], off)
		if k > 0 {
			if _, err := bw.Write(buf[:k]); err != nil {
				return off, err
			}
			off += int64(k)
			progress(int64(k))
		}
		if err != nil && !(err == io.EOF && off == size) {
			return off, err
		}
	}
	return size, bw.Flush()
}

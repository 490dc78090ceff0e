package checkpoint

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/sourcefile"
)

// Store is a place other than a local directory that holds a checkpoint's
// files: a bucket of an object store (package objstore). The catalog lists
// it once, at open, and opens each file it reads as one pinned version.
type Store interface {
	// String names the store in messages, provenance and Catalog.Dir
	// (s3://BUCKET/PREFIX).
	String() string
	// List returns every file of the store; Name is the file's
	// slash-separated path inside the store.
	List(ctx context.Context) ([]fs.FileInfo, error)
	// Open opens the file name as the version it has now.
	Open(ctx context.Context, name string) (sourcefile.Object, error)
}

// OpenStore catalogs the checkpoint kept in st, as Open catalogs a
// directory: every fault but an unusable store becomes a Problem. Files
// whose path has a component starting with a dot are left out, as Open
// skips hidden directories.
func OpenStore(ctx context.Context, st Store) (*Catalog, error) {
	infos, err := st.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("source checkpoint %s: %w", st, err)
	}
	c := &Catalog{Dir: st.String(), Config: &Config{}, ids: make(map[string]fileID), store: st, listed: make(map[string]fs.FileInfo),
		tokenizers: new(tokenizerMemo)}
	var files []File
	for _, fi := range infos {
		name := fi.Name()
		if hidden(name) || !fi.Mode().IsRegular() {
			continue
		}
		f := File{Name: name, Path: c.pathOf(name), Size: fi.Size()}
		files = append(files, f)
		c.listed[f.Path] = fi
		if fi.ModTime().After(c.listedAt) {
			c.listedAt = fi.ModTime()
		}
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return c.build(files, nil, nil)
}

// hidden says whether a slash-separated path has a component starting
// with a dot.
func hidden(name string) bool {
	for part := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

// pathOf is the path of the catalogued file name (slash-separated,
// relative): under Dir, joined by the store's rule for a store, since
// filepath.Join would fold s3:// into s3:/.
func (c *Catalog) pathOf(name string) string {
	if c.store != nil {
		return c.Dir + "/" + name
	}
	return filepath.Join(c.Dir, filepath.FromSlash(name))
}

// openFile opens the file name of the checkpoint: from the store, or
// through the symbolic link rule (roots.open) in a directory.
func (c *Catalog) openFile(name string) (*sourcefile.File, error) {
	p := c.pathOf(name)
	if c.store != nil {
		o, err := c.store.Open(context.Background(), name)
		if err != nil {
			return nil, err
		}
		return sourcefile.FromObject(p, o), nil
	}
	osf, _, err := c.roots.open(p)
	if err != nil {
		return nil, err
	}
	return sourcefile.FromFile(p, osf)
}

// OpenFile opens the catalogued file at p (a File's or a shard's Path)
// again, for serving: whatever it is now must be the file the catalog
// checked there (CheckOpened), and its reads fail once it changes.
func (c *Catalog) OpenFile(p string) (*sourcefile.File, error) {
	if c.store != nil {
		name, ok := strings.CutPrefix(p, c.Dir+"/")
		if _, listed := c.listed[p]; !ok || !listed {
			return nil, fmt.Errorf("%s: not a file of the catalog", p)
		}
		return c.openFile(name)
	}
	f, err := sourcefile.Open(p)
	if err != nil {
		return nil, err
	}
	if err := c.CheckOpened(p, f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Stat is the status of Dir or of a catalogued file at p, as stat(2)
// gives it (symbolic links followed) in a directory, and as the listing
// gave it in a store, where every file is its owner's (sourcefile.ObjectInfo).
func (c *Catalog) Stat(p string) (fs.FileInfo, error) {
	if c.store == nil {
		return os.Stat(p)
	}
	if p == c.Dir {
		return sourcefile.ObjectInfo(p, 0, c.listedAt, true), nil
	}
	fi, ok := c.listed[p]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	return sourcefile.ObjectInfo(p, fi.Size(), fi.ModTime(), false), nil
}

// Remote reports whether the checkpoint is kept in a Store, not a local
// directory.
func (c *Catalog) Remote() bool { return c.store != nil }

// HasFile reports whether the checkpoint has a file of that name among
// Files (a name relative to Dir, as File.Name has it).
func (c *Catalog) HasFile(name string) bool {
	return slices.ContainsFunc(c.Files, func(f File) bool { return f.Name == name })
}

// ReadFile reads the catalogued file name (slash-separated, relative to
// Dir), of at most max bytes, whole: from the store, or in a directory
// through the symbolic link rule the catalog checked. A larger file is
// refused by its size before reading. Whoever reads a file of the
// checkpoint (a tokenizer, a config) reads it here, never by its path,
// which for a store is no path at all.
func (c *Catalog) ReadFile(name string, max int64) ([]byte, error) {
	f, err := c.openFile(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Size() > max {
		return nil, fmt.Errorf("%d bytes, larger than the %d-byte limit", f.Size(), max)
	}
	// One read of the size the file had when opened: a file that grew or
	// shrank since fails it (sourcefile's check), so no limit is passed.
	b := make([]byte, f.Size())
	if n, err := f.ReadOnceAt(b, 0); n < len(b) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

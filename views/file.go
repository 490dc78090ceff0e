// Package views turns a catalog into trees of virtual files. A view never
// touches FUSE: a file is a run of segments (literal bytes, byte ranges of
// source files, derived blocks) read through a Reader, the io.ReaderAt seam
// that both the mount and `dsfs export` use.
package views

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/sourcefile"
)

// Segment is one contiguous piece of a virtual file.
type Segment interface {
	Len() int64
}

// Bytes is literal content (headers, small generated tensors).
type Bytes []byte

// Len implements Segment.
func (b Bytes) Len() int64 { return int64(len(b)) }

// Range is a byte range of a source file served unchanged.
type Range struct {
	R   io.ReaderAt // a *checkpoint.Shard or a source file
	Off int64
	N   int64
}

// Len implements Segment.
func (r Range) Len() int64 { return r.N }

// Unreadable is a run of bytes that must not be served: every read of it
// fails with Err. It stands for a bad source shard in the derived views, so
// that a loader fails loudly, naming the shard, instead of loading a
// checkpoint with the shard left out.
type Unreadable struct {
	N   int64
	Err error
}

// Len implements Segment.
func (u Unreadable) Len() int64 { return u.N }

// Blocks is derived data computed in blocks of BlockLen bytes (the last may
// be shorter). Compute fills dst with block i; it must be a pure function of
// the source bytes so a block can be cached and recomputed at will.
type Blocks struct {
	ID       string // unique within a mount: view, file and tensor
	N        int64
	BlockLen int64
	Compute  func(ctx context.Context, i int64, dst []byte) error
}

// Len implements Segment.
func (b *Blocks) Len() int64 { return b.N }

// Count is the number of blocks.
func (b *Blocks) Count() int64 { return (b.N + b.BlockLen - 1) / b.BlockLen }

// blockLen is the length of block i.
func (b *Blocks) blockLen(i int64) int64 { return min(b.BlockLen, b.N-i*b.BlockLen) }

// File is a virtual file of known size.
type File struct {
	segs []Segment
	ends []int64 // ends[i] is the file offset just past segs[i]
	// Source is set when the file is a source file served unchanged, so the
	// mount may let the kernel read it directly.
	Source string
	// Origin is the source file opened at mount: the mount hands the kernel
	// a descriptor only once Origin has checked that the path still names
	// that file, unchanged.
	Origin *sourcefile.File
}

// NewFile concatenates segments into a file.
func NewFile(segs ...Segment) *File {
	f := &File{}
	for _, s := range segs {
		f.Append(s)
	}
	return f
}

// Append adds a segment at the end of the file.
func (f *File) Append(s Segment) {
	if s.Len() == 0 {
		return
	}
	f.segs = append(f.segs, s)
	f.ends = append(f.ends, f.Size()+s.Len())
}

// Size is the file's length in bytes.
func (f *File) Size() int64 {
	if len(f.ends) == 0 {
		return 0
	}
	return f.ends[len(f.ends)-1]
}

// segment returns the index of the segment holding offset off.
func (f *File) segment(off int64) int {
	return sort.Search(len(f.ends), func(i int) bool { return f.ends[i] > off })
}

func (f *File) start(i int) int64 {
	if i == 0 {
		return 0
	}
	return f.ends[i-1]
}

// Doc is a generated document (JSON or Markdown report) computed whole the
// first time it is read and kept for the life of the mount.
type Doc struct {
	generate func(ctx context.Context) ([]byte, error)

	dynamic bool // regenerated on every read (live status)
	headers bool // follows from the headers: cheap enough to generate when stat'ed

	mu   sync.Mutex
	data []byte
	done bool
}

// NewDoc returns a document produced by generate.
func NewDoc(generate func(ctx context.Context) ([]byte, error)) *Doc {
	return &Doc{generate: generate}
}

// NewHeaderDoc returns a document that follows from the headers alone
// (plan.json, a README): cheap enough to generate when its size is first
// asked for, so that it has its exact size from the first stat.
func NewHeaderDoc(generate func(ctx context.Context) ([]byte, error)) *Doc {
	return &Doc{generate: generate, headers: true}
}

// NewDynamicDoc returns a document generated afresh on every read, such as
// live status; its size is never known in advance.
func NewDynamicDoc(generate func(ctx context.Context) ([]byte, error)) *Doc {
	return &Doc{generate: generate, dynamic: true}
}

// StaticDoc is a document whose content is known already.
func StaticDoc(b []byte) *Doc { return &Doc{data: b, done: true} }

// Bytes returns the document, generating it on first use. A failed or
// interrupted generation is not kept, so the next read tries again.
func (d *Doc) Bytes(ctx context.Context) ([]byte, error) {
	if d.dynamic {
		return d.generate(ctx)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return d.data, nil
	}
	b, err := d.generate(ctx)
	if err != nil {
		return nil, err
	}
	d.data, d.done = b, true
	return b, nil
}

// Live reports whether the document is generated afresh on every read.
func (d *Doc) Live() bool { return d.dynamic }

// FromHeaders reports whether the document follows from the headers, so
// that it may be generated to answer a stat.
func (d *Doc) FromHeaders() bool { return d.headers }

// Size returns the document's size once it has been generated.
func (d *Doc) Size() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int64(len(d.data)), d.done
}

// Node is a file or directory of a view tree: exactly one of Children (a
// directory, possibly empty), File or Doc is set.
type Node struct {
	Name     string
	Children []*Node
	File     *File
	Doc      *Doc
	// From lists the source files a file is made from, for its
	// attributes; nil means every file of the checkpoint.
	From []string
	// Attr is what the node shows of its sources, set by Build.
	Attr Attr
}

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.File == nil && n.Doc == nil }

// Dir returns a directory node whose children are sorted by name.
func Dir(name string, children ...*Node) *Node {
	if children == nil {
		children = []*Node{}
	}
	sort.Slice(children, func(i, j int) bool { return children[i].Name < children[j].Name })
	return &Node{Name: name, Children: children}
}

// Child returns the child called name.
func (n *Node) Child(name string) *Node {
	i := sort.Search(len(n.Children), func(i int) bool { return n.Children[i].Name >= name })
	if i < len(n.Children) && n.Children[i].Name == name {
		return n.Children[i]
	}
	return nil
}

// Walk calls fn for n and every node below it, with the slash-separated path
// relative to n ("" for n itself), parents before children.
func (n *Node) Walk(fn func(path string, n *Node) error) error {
	return n.walk("", fn)
}

func (n *Node) walk(path string, fn func(string, *Node) error) error {
	if err := fn(path, n); err != nil {
		return err
	}
	for _, c := range n.Children {
		p := c.Name
		if path != "" {
			p = path + "/" + c.Name
		}
		if err := c.walk(p, fn); err != nil {
			return err
		}
	}
	return nil
}

// Lookup finds the node at a slash-separated path below n.
func (n *Node) Lookup(path string) (*Node, error) {
	cur := n
	for path != "" {
		var name string
		name, path, _ = strings.Cut(path, "/")
		if cur = cur.Child(name); cur == nil {
			return nil, fmt.Errorf("%s: no such file", name)
		}
	}
	return cur, nil
}

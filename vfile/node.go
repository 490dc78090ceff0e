package vfile

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Attr is what a file or directory of a view shows of the source files it
// is made from: the mount serves the checkpoint's owners, permissions and
// times, never more access than the sources grant.
type Attr struct {
	Perm     uint32 // permission bits, write bits cleared
	Uid, Gid uint32
	Mtime    time.Time
	Ctime    time.Time
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
	// Attr is what the node shows of its sources, set by the view set.
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

package views

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
)

// openFiles are the source files the views of a set opened, each once.
type openFiles struct {
	mu sync.Mutex
	m  map[string]*sourcefile.File
}

// open returns the shared open handle of a source file, whose reads fail
// once the file changes.
func (s *Set) open(p string) (*sourcefile.File, error) {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	if f, ok := s.files.m[p]; ok {
		return f, nil
	}
	f, err := s.Cat.OpenFile(p)
	if err != nil {
		return nil, err
	}
	s.files.m[p] = f
	return f, nil
}

// sourceFile is a file of the checkpoint served unchanged, as it was when
// the views opened it.
func (s *Set) sourceFile(name, p string) (*vfile.Node, error) {
	f, err := s.open(p)
	if err != nil {
		return nil, err
	}
	return sourceNode(name, f), nil
}

// sourceNode serves an opened source file unchanged.
func sourceNode(name string, f *sourcefile.File) *vfile.Node {
	file := vfile.NewFile(vfile.Range{R: f, Off: 0, N: f.Size()})
	file.Source = f.Path()
	if f.Local() {
		file.Origin = f // for the kernel to read it directly
	}
	return &vfile.Node{Name: name, File: file, From: []string{f.Path()}}
}

// tree places file nodes at their slash-separated paths under a directory.
func tree(name string, files map[string]*vfile.Node) *vfile.Node {
	root := vfile.Dir(name)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		dir := root
		parts := strings.Split(p, "/")
		for _, d := range parts[:len(parts)-1] {
			c := dir.Child(d)
			if c == nil {
				c = vfile.Dir(d)
				dir.Children = append(dir.Children, c)
				sort.Slice(dir.Children, func(i, j int) bool { return dir.Children[i].Name < dir.Children[j].Name })
			}
			dir = c
		}
		n := files[p]
		n.Name = parts[len(parts)-1]
		dir.Children = append(dir.Children, n)
		sort.Slice(dir.Children, func(i, j int) bool { return dir.Children[i].Name < dir.Children[j].Name })
	}
	return root
}

// badShard keeps a bad source shard visible in a derived view: the index
// still places the shard's tensors (as the source index names them) in
// file, and file, when the source has one, fails every read naming the
// shard and the reason. A loader of the view then fails loudly instead of
// loading a checkpoint with the shard's tensors quietly left out.
func (s *Set) badShard(files map[string]*vfile.Node, weightMap map[string]string, file string, b checkpoint.BadShard) {
	for _, t := range b.Tensors {
		if _, ok := weightMap[t]; !ok {
			weightMap[t] = file
		}
	}
	badShardFile(files, file, b)
}

// badShardFile is the file part of badShard: the file, when the source
// has one, fails every read naming the shard and the reason.
func badShardFile(files map[string]*vfile.Node, file string, b checkpoint.BadShard) {
	if b.Size < 0 {
		return // missing: the loader's open fails, naming it
	}
	err := fmt.Errorf("source shard %s is bad (%s), so its tensors cannot be served; source/ has the file as it is", b.Name, b.Reason)
	files[file] = &vfile.Node{File: vfile.NewFile(vfile.Unreadable{N: b.Size, Err: err})}
}

// jsonDoc is a generated JSON document.
func jsonDoc(gen func(ctx context.Context) (any, error)) *vfile.Node {
	return &vfile.Node{Doc: vfile.NewDoc(jsonText(gen))}
}

// jsonText generates a document as indented JSON.
func jsonText(gen func(ctx context.Context) (any, error)) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		v, err := gen(ctx)
		if err != nil {
			return nil, err
		}
		return vfile.JSON(v)
	}
}

package vfile_test

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/vfile"
)

// A file made of a literal header, a range of a source file and derived
// blocks, read through a block cache.
func ExampleFile() {
	source := strings.NewReader("....source bytes....")
	upper := &vfile.Blocks{ID: "example/upper", N: 6, BlockLen: 4,
		Compute: func(_ context.Context, i int64, dst []byte) error {
			// Block i of the derived data: a pure function of source bytes.
			src := make([]byte, len(dst))
			if _, err := source.ReadAt(src, 4+i*4); err != nil {
				return err
			}
			copy(dst, strings.ToUpper(string(src)))
			return nil
		}}
	f := vfile.NewFile(vfile.Bytes("head|"), vfile.Range{R: source, Off: 4, N: 6}, vfile.Bytes("|"), upper)

	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	b, _ := io.ReadAll(io.NewSectionReader(vfile.NewReader(f, cache), 0, f.Size()))
	fmt.Printf("%d bytes: %s\n", f.Size(), b)
	// Output: 18 bytes: head|source|SOURCE
}

// A document is generated on first read and kept.
func ExampleDoc() {
	runs := 0
	d := vfile.NewDoc(func(context.Context) ([]byte, error) {
		runs++
		return []byte(`{"tensors": 3}`), nil
	})
	_, known := d.Stat(context.Background())
	fmt.Println("size known before reading:", known)
	for range 2 {
		b, _ := d.Bytes(context.Background())
		fmt.Println(string(b))
	}
	fmt.Println("generated", runs, "time(s)")
	// Output:
	// size known before reading: false
	// {"tensors": 3}
	// {"tensors": 3}
	// generated 1 time(s)
}

// A streamed document is measured by its first stat and written afresh by
// each read: only its size is kept.
func ExampleNewStreamedDoc() {
	writes := 0
	d := vfile.NewStreamedDoc(func(_ context.Context, w io.Writer) error {
		writes++
		return vfile.WriteJSON(w, map[string]int{"tensors": 3})
	})
	n, known := d.Stat(context.Background())
	fmt.Println("size at first stat:", n, known)
	for range 2 {
		b, _ := d.Bytes(context.Background())
		fmt.Print(string(b))
	}
	fmt.Println("written", writes, "time(s)")
	// Output:
	// size at first stat: 19 true
	// {
	//   "tensors": 3
	// }
	// {
	//   "tensors": 3
	// }
	// written 3 time(s)
}

// A tree of nodes is what a view builds; Lookup and Walk find files in it.
func ExampleNode() {
	root := vfile.Dir("",
		vfile.Dir("q2", &vfile.Node{Name: "plan.json", Doc: vfile.NewDoc(func(context.Context) ([]byte, error) { return []byte("{}\n"), nil })}),
		&vfile.Node{Name: "config.json", File: vfile.NewFile(vfile.Bytes("{}\n"))})
	root.Walk(func(path string, n *vfile.Node) error {
		if !n.IsDir() {
			fmt.Println(path)
		}
		return nil
	})
	n, _ := root.Lookup("q2/plan.json")
	fmt.Println(n.Name, n.Doc != nil)
	// Output:
	// config.json
	// q2/plan.json
	// plan.json true
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/views"
)

func runExport(args []string) error {
	fs := flags("export")
	cacheMB := fs.Int("cache-mb", 256, "memory budget of the block cache, MiB")
	qf := addQ2Flags(fs)
	tf := addTraceFlags(fs)
	pos, err := parse(fs, args, 3, 3)
	if err != nil {
		return err
	}
	opt, err := qf.options([]string{pos[0]})
	if err != nil {
		return err
	}
	tf.apply(&opt)
	cache := blockcache.New(int64(*cacheMB)<<20, runtime.NumCPU())
	opt.Cache = cache
	src, err := openSource(pos[1], opt)
	if err != nil {
		cache.Close()
		return err
	}
	defer src.Close()
	defer cache.Close() // computations stop before the sources close
	view := src.set.Root.Child(pos[0])
	n, err := export(context.Background(), view, cache, pos[2])
	if err != nil {
		return err
	}
	fmt.Printf("exported %s: %d files to %s\n", pos[0], n, pos[2])
	return nil
}

// export writes every file of a view tree below out, reading it exactly as
// the mount does (views.Reader over the block cache).
func export(ctx context.Context, view *views.Node, cache views.Cache, out string) (int, error) {
	files := 0
	err := view.Walk(func(p string, n *views.Node) error {
		dst := filepath.Join(out, filepath.FromSlash(p))
		if n.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		files++
		var r io.Reader
		if n.File != nil {
			r = io.NewSectionReader(views.NewReader(n.File, cache), 0, n.File.Size())
		} else {
			b, err := n.Doc.Bytes(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			r = bytes.NewReader(b)
		}
		return writeFile(dst, r)
	})
	return files, err
}

func writeFile(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 4<<20)
	if _, err := io.CopyBuffer(w, r, make([]byte, 1<<20)); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

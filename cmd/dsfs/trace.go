package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/views"
)

// runTrace runs trace/ on a checkpoint without mounting it, through the
// same view a mount serves: every layer it can run, a line per layer, and
// trace.json and the figures as the mount serves them.
func runTrace(args []string) error {
	fs := flags("trace")
	jsonOut := fs.String("json", "", "write trace.json, the report of the whole trace, to this file")
	pngDir := fs.String("png", "", "write the figures to this directory: routes/ID.png per prompt, layers/NN.load.png per routing layer")
	vf := addViewFlags(fs, "trace")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	opt := views.Options{Views: []string{"trace"}}
	vf.apply(&opt)
	src, err := openSource(pos[0], opt)
	if err != nil {
		return err
	}
	defer src.Close()
	for _, w := range src.set.Warnings() {
		slog.Warn(w)
	}
	root := src.set.Root.Child("trace")
	if n := root.Child("ERROR.txt"); n != nil {
		b, err := readNode(context.Background(), n)
		if err != nil {
			return err
		}
		if root.Child("trace.json") == nil || root.Child("layers") == nil {
			// ERROR.txt's reason and its details, on one line.
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			for i, l := range lines[1:] {
				lines[i+1] = strings.TrimPrefix(l, "- ")
			}
			msg := lines[0]
			if len(lines) > 1 {
				msg += " " + strings.Join(lines[1:], "; ")
			}
			return fmt.Errorf("%s: %s", pos[0], msg)
		}
		os.Stderr.Write(b)
	}
	ctx, cancel := interruptible()
	defer cancel()
	report, err := root.Child("trace.json").Doc.Bytes(ctx) // runs every layer
	if err != nil {
		return fmt.Errorf("trace.json: %w", err)
	}
	if err := printLayers(ctx, os.Stdout, root.Child("layers")); err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeWith(*jsonOut, func(w io.Writer) error { _, err := w.Write(report); return err }); err != nil {
			return err
		}
	}
	if *pngDir != "" {
		return writeFigures(ctx, os.Stdout, root, *pngDir)
	}
	return nil
}

// printLayers prints a line per layer record under dir: the routes it
// made, how evenly they spread and its most routed experts.
func printLayers(ctx context.Context, w io.Writer, dir *vfile.Node) error {
	return dir.Walk(func(p string, n *vfile.Node) error {
		if !strings.HasSuffix(p, ".json") {
			return nil
		}
		b, err := readNode(ctx, n)
		if err != nil {
			return fmt.Errorf("layers/%s: %w", p, err)
		}
		var rec struct {
			Layer   int                 `json:"layer"`
			Routing *trace.RoutingTrace `json:"routing"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("layers/%s: %w", p, err)
		}
		r := rec.Routing
		if r == nil {
			fmt.Fprintf(w, "layer %2d: dense\n", rec.Layer)
			return nil
		}
		var top []string
		for _, e := range r.TopExperts[:min(5, len(r.TopExperts))] {
			top = append(top, fmt.Sprintf("%d (%d)", e.Expert, e.Routes))
		}
		m := r.AggregateMetrics
		fmt.Fprintf(w, "layer %2d: %d routes over %d experts, gini %.3f, effective experts %.1f; most routed: %s\n",
			rec.Layer, m.Routes, len(r.AggregateLoad), m.Gini, m.EffectiveExperts, strings.Join(top, ", "))
		return nil
	})
}

// writeFigures writes every PNG of a view tree below dir, at its path in
// the view, with a line on w for each.
func writeFigures(ctx context.Context, w io.Writer, root *vfile.Node, dir string) error {
	return root.Walk(func(p string, node *vfile.Node) error {
		if node.IsDir() || !strings.HasSuffix(p, ".png") {
			return nil
		}
		b, err := readNode(ctx, node)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := writeWith(out, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s\n", out)
		return nil
	})
}

// readNode reads a document, or a file made at mount, whole.
func readNode(ctx context.Context, n *vfile.Node) ([]byte, error) {
	if n.Doc != nil {
		return n.Doc.Bytes(ctx)
	}
	return io.ReadAll(io.NewSectionReader(vfile.NewReader(n.File, nil), 0, n.File.Size()))
}

package integration

import (
	"bytes"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/figures"
	"github.com/dsfs/dsfs/internal/testdata"
)

// readFigure opens a figure of the mount, checks that its stat once open
// (before any read) and after reading give the size the read gives, and
// decodes it: a PNG of at least figures.MinWidth × MinHeight.
func readFigure(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if open.Size() != int64(len(b)) || after.Size() != int64(len(b)) {
		t.Errorf("%s: stat says %d bytes once open, %d after the read; the read gave %d", path, open.Size(), after.Size(), len(b))
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if r := img.Bounds(); r.Dx() < figures.MinWidth || r.Dy() < figures.MinHeight {
		t.Errorf("%s: %d×%d pixels, want at least %d×%d", path, r.Dx(), r.Dy(), figures.MinWidth, figures.MinHeight)
	}
	return b
}

// TestFigures mounts the V2-Lite reference checkpoint with its golden
// sequences as token-id prompts and reads the figures: trace/'s, which
// need the layers run and so show size 0 until opened, as trace.json does
// (a stat runs nothing), and manifest/bytes.png, which follows from the
// headers and has its exact size from the first stat. Each decodes with
// image/png at its stat's size, a second read and a second mount give
// the same bytes.
func TestFigures(t *testing.T) {
	dir := filepath.Join(testdata.Dir(t), "trace", "v2lite-tiny")
	var prompts []map[string]any
	for i, s := range readGolden(t, dir) {
		prompts = append(prompts, map[string]any{"id": fmt.Sprintf("seq%d", i), "label": "golden", "token_ids": s.TokenIDs})
	}
	args := []string{"--views", "trace,manifest", "--device", "cpu", "--no-hash", "--trace-prompts", writePrompts(t, prompts)}
	m := startMount(t, dir, args...)

	traceFigures := []string{"layers/01.load.png", "layers/02.load.png", "layers/03.load.png", "routes/seq0.png", "routes/seq1.png"}
	var found []string
	for _, sub := range []string{"layers", "routes"} {
		ents, err := os.ReadDir(m.path("trace", sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if filepath.Ext(e.Name()) == ".png" {
				found = append(found, sub+"/"+e.Name())
			}
		}
	}
	if !slices.Equal(found, traceFigures) {
		t.Fatalf("trace/ figures %v, want %v", found, traceFigures)
	}
	for _, f := range traceFigures {
		fi, err := os.Stat(m.path("trace", f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != 0 {
			t.Errorf("trace/%s before it is opened: %d bytes; want 0, as trace.json", f, fi.Size())
		}
	}
	if n := layerForwards(t, m); n != 0 {
		t.Fatalf("%d layer forwards after stats", n)
	}
	fi, err := os.Stat(m.path("manifest", "bytes.png"))
	if err != nil {
		t.Fatal(err)
	}
	bytesPNG := readFigure(t, m.path("manifest", "bytes.png"))
	if fi.Size() != int64(len(bytesPNG)) {
		t.Errorf("manifest/bytes.png: first stat %d bytes, read %d", fi.Size(), len(bytesPNG))
	}

	first := map[string][]byte{"manifest/bytes.png": bytesPNG}
	for _, f := range traceFigures {
		first["trace/"+f] = readFigure(t, m.path("trace", f))
	}
	if n := layerForwards(t, m); n != 4 {
		t.Errorf("the figures ran %d layer forwards, want the 4 layers once", n)
	}
	for f, b := range first {
		if again := readFigure(t, m.path(f)); !bytes.Equal(again, b) {
			t.Errorf("%s: a second read gave other bytes", f)
		}
	}
	m.stop(t)
	m2 := startMount(t, dir, args...)
	for f, b := range first {
		if again := readFigure(t, m2.path(f)); !bytes.Equal(again, b) {
			t.Errorf("%s: a second mount gave other bytes", f)
		}
	}
}

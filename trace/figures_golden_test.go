package trace_test

import (
	"bytes"
	"context"
	"image/png"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/figures"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/trace"
)

// TestGoldenFigures traces each reference checkpoint of testdata/trace
// (every family, V4's hash-routed layers and V4.1's included) with two
// prompts of token ids and draws every figure Files lists: each decodes
// as a PNG of at least figures.MinWidth × MinHeight, and drawing it again
// gives the same bytes.
func TestGoldenFigures(t *testing.T) {
	for _, name := range []string{"v2lite-tiny", "v3-tiny", "v4-tiny", "v41-tiny"} {
		t.Run(name, func(t *testing.T) {
			cat, err := checkpoint.Open(filepath.Join(testdata.Dir(t), "trace", name))
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			m, err := trace.Lookup(cat.Config.Family).Open(cat, nil)
			if err != nil {
				t.Fatal(err)
			}
			prompts := []trace.Prompt{{ID: "p0", TokenIDs: []int{1, 5, 9, 2}}, {ID: "p1", TokenIDs: []int{3, 4, 7}}}
			if err := trace.Encode(prompts, nil, m.Vocab()); err != nil {
				t.Fatal(err)
			}
			tr, err := m.Trace(prompts, trace.Options{})
			if err != nil {
				t.Fatal(err)
			}
			files, err := trace.Files(tr, m.Layers(), m.Problems())
			if err != nil {
				t.Fatal(err)
			}
			var loads, routes int
			for _, f := range files {
				if !strings.HasSuffix(f.Name, ".png") {
					continue
				}
				if strings.HasPrefix(f.Name, "routes/") {
					routes++
				} else {
					loads++
				}
				b, err := f.Doc(context.Background())
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				img, err := png.Decode(bytes.NewReader(b))
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				if r := img.Bounds(); r.Dx() < figures.MinWidth || r.Dy() < figures.MinHeight {
					t.Errorf("%s: %d×%d pixels", f.Name, r.Dx(), r.Dy())
				}
				if again, err := f.Doc(context.Background()); err != nil || !bytes.Equal(again, b) {
					t.Errorf("%s drawn again: %d bytes (%v), first %d", f.Name, len(again), err, len(b))
				}
			}
			if routes != len(prompts) || loads == 0 {
				t.Errorf("%d route maps for %d prompts, %d load charts", routes, len(prompts), loads)
			}
		})
	}
}

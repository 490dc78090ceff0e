package gguf_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/gguf"
)

// TestCompute computes every computed part of the IQ2_XXS recipe through
// a disk cache twice: each time the bytes are Fill's, the costly types
// (IQ2_XXS, Q2_K) are stored under the key FORMATS.md gives and read
// back the second time, and the others never touch the disk.
func TestCompute(t *testing.T) {
	cat, err := checkpoint.Open(wideV3(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	m, err := recipe(t, "IQ2_XXS").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	disk, err := diskcache.Open(t.TempDir(), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	costly := 0
	for _, ten := range m.Tensors {
		for j := range ten.Parts {
			p := &ten.Parts[j]
			if p.Q2 || p.Decode == nil && p.Bytes == nil {
				continue
			}
			want := make([]byte, p.Rows*ten.RowBytes())
			if err := ten.Fill(ctx, *p, 0, p.Rows, want); err != nil {
				t.Fatal(err)
			}
			cached := ten.Type == gguf.IQ2_XXS || ten.Type == gguf.Q2_K
			if cached {
				costly++
			}
			for run := range 2 {
				st := disk.Stats()
				got := make([]byte, len(want))
				if err := ten.Compute(p, disk)(ctx, 0, p.Rows, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s run %d: Compute's bytes are not Fill's", ten.Name, run)
				}
				d := disk.Stats()
				hits, writes := d.Hits-st.Hits, d.Writes-st.Writes
				switch {
				case !cached && (hits != 0 || writes != 0 || d.Misses != st.Misses):
					t.Fatalf("%s (%s): a rounded type went through the disk", ten.Name, ten.Type.Name)
				case cached && run == 0 && writes != 1, cached && run == 1 && hits != 1:
					t.Fatalf("%s (%s) run %d: %d hits, %d writes", ten.Name, ten.Type.Name, run, hits, writes)
				}
			}
			if cached && p.Src.Scale == nil {
				src := make([]byte, p.Src.Size)
				if _, err := p.Src.ReadAt(src, 0); err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				fmt.Fprintf(h, "dsfs gguf block\x00codec %s\x00%s\x00%d rows x %d weights\x00%s\x00", codecs.Version, ten.Type.Name, p.Rows, ten.Ne[0], p.Src.DType)
				h.Write(src)
				if b, err := disk.Lookup(diskcache.Key(h.Sum(nil))); err != nil || !bytes.Equal(b, want) {
					t.Fatalf("%s: no entry under the documented key: %v", ten.Name, err)
				}
			}
		}
	}
	if costly == 0 {
		t.Fatal("the recipe computed no IQ2_XXS or Q2_K part")
	}
}

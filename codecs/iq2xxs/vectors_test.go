package iq2xxs

import (
	"bytes"
	"math"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
)

func loadVectors(tb testing.TB) []testdata.GGMLCase {
	tb.Helper()
	return testdata.GGML(tb, "iq2_xxs_unit.json.gz", "IQ2_XXS")
}

func ones(n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func TestVectors(t *testing.T) {
	for _, c := range loadVectors(t) {
		t.Run(c.Name, func(t *testing.T) {
			if c.Type != "IQ2_XXS" || c.Recipe != "iq2_xxs_unit" {
				t.Fatalf("case is %s/%s, want IQ2_XXS/iq2_xxs_unit", c.Type, c.Recipe)
			}
			src, want, wantF := c.Input, c.Expect, c.Dequant
			if len(src) != c.NRows*c.NPerRow || len(want) != RowBytes(len(src)) || len(wantF) != len(src) {
				t.Fatalf("sizes: %d inputs, %d bytes, %d dequant for %dx%d", len(src), len(want), len(wantF), c.NRows, c.NPerRow)
			}
			for _, imp := range []struct {
				name string
				w    []float32
			}{{"explicit ones", ones(c.NPerRow)}, {"nil", nil}} {
				got := make([]byte, len(want))
				Quantize(got, src, imp.w)
				if !bytes.Equal(got, want) {
					i := firstDiff(got, want)
					blk := i / BlockBytes
					t.Fatalf("importance %s: byte %d (row %d, block %d of the row) = %#02x, want %#02x\ngot  %x\nwant %x",
						imp.name, i, blk/(c.NPerRow/BlockWeights), blk%(c.NPerRow/BlockWeights), got[i], want[i],
						got[blk*BlockBytes:(blk+1)*BlockBytes], want[blk*BlockBytes:(blk+1)*BlockBytes])
				}
			}
			gotF := make([]float32, len(src))
			Dequantize(gotF, want)
			for i := range gotF {
				g, w := gotF[i], wantF[i]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("dequant[%d] = %g (%#08x), want %g (%#08x)", i, g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

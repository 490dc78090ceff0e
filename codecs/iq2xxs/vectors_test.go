package iq2xxs

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
)

// vectorCase is one case of ggml's reference vectors (testdata/ggml/README.md).
type vectorCase struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Type    string `json:"type"`
	Recipe  string `json:"recipe"`
	NPerRow int    `json:"n_per_row"`
	NRows   int    `json:"nrows"`
	Input   string `json:"input_f32_b64"`
	Expect  string `json:"expected_b64"`
	Dequant string `json:"dequant_f32_b64"`
}

// readGzipJSON decodes the gzip-compressed JSON file name of the ggml vectors
// into v.
func readGzipJSON(tb testing.TB, name string, v any) {
	tb.Helper()
	path := filepath.Join(testdata.Dir(tb), "ggml", name)
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

func loadVectors(tb testing.TB) []vectorCase {
	tb.Helper()
	var cases []vectorCase
	readGzipJSON(tb, "iq2_xxs_unit.json.gz", &cases)
	if len(cases) == 0 {
		tb.Fatal("iq2_xxs_unit.json.gz holds no cases")
	}
	return cases
}

func decodeB64(tb testing.TB, what, s string) []byte {
	tb.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	return b
}

func decodeFloats(tb testing.TB, what, s string) []float32 {
	tb.Helper()
	raw := decodeB64(tb, what, s)
	if len(raw)%4 != 0 {
		tb.Fatalf("%s: %d bytes is not a float32 array", what, len(raw))
	}
	x := make([]float32, len(raw)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return x
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
			src := decodeFloats(t, "input", c.Input)
			want := decodeB64(t, "expected", c.Expect)
			wantF := decodeFloats(t, "dequant", c.Dequant)
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

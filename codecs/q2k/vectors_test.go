package q2k

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

// vectorCase is one case of the ggml reference vectors (testdata/ggml/README.md).
type vectorCase struct {
	Name    string
	NPerRow int
	NRows   int
	Input   []float32
	Expect  []byte
	Dequant []float32
}

func loadVectors(t testing.TB, file string) []vectorCase {
	t.Helper()
	path := filepath.Join(testdata.Dir(t), "ggml", file)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var raw []struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		NPerRow int    `json:"n_per_row"`
		NRows   int    `json:"nrows"`
		Input   string `json:"input_f32_b64"`
		Expect  string `json:"expected_b64"`
		Dequant string `json:"dequant_f32_b64"`
	}
	if err := json.NewDecoder(zr).Decode(&raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(raw) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	cases := make([]vectorCase, len(raw))
	for i, r := range raw {
		if r.Type != "Q2_K" {
			t.Fatalf("%s: case %s has type %q, want Q2_K", path, r.Name, r.Type)
		}
		c := vectorCase{Name: r.Name, NPerRow: r.NPerRow, NRows: r.NRows}
		c.Input = decodeFloats(t, r.Input)
		c.Dequant = decodeFloats(t, r.Dequant)
		c.Expect = decodeBase64(t, r.Expect)
		n := r.NPerRow * r.NRows
		if len(c.Input) != n || len(c.Dequant) != n || len(c.Expect) != RowBytes(n) {
			t.Fatalf("%s: case %s: %d inputs, %d dequant values, %d bytes for %dx%d weights",
				path, r.Name, len(c.Input), len(c.Dequant), len(c.Expect), r.NRows, r.NPerRow)
		}
		cases[i] = c
	}
	return cases
}

func decodeBase64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeFloats(t testing.TB, s string) []float32 {
	t.Helper()
	b := decodeBase64(t, s)
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func unitImportance(n int) []float32 {
	qw := make([]float32, n)
	for i := range qw {
		qw[i] = 1
	}
	return qw
}

func TestVectors(t *testing.T) {
	for _, tc := range []struct {
		file     string
		quantize func(dst []byte, src []float32, nPerRow int)
	}{
		{"q2_k_ref.json.gz", func(dst []byte, src []float32, _ int) { QuantizeRef(dst, src) }},
		{"q2_k_unit.json.gz", func(dst []byte, src []float32, nPerRow int) {
			QuantizeImportance(dst, src, unitImportance(nPerRow))
		}},
	} {
		for _, c := range loadVectors(t, tc.file) {
			t.Run(tc.file+"/"+c.Name, func(t *testing.T) {
				got := make([]byte, len(c.Expect))
				tc.quantize(got, c.Input, c.NPerRow)
				if !bytes.Equal(got, c.Expect) {
					for off := 0; off < len(got); off += BlockBytes {
						g, e := got[off:off+BlockBytes], c.Expect[off:off+BlockBytes]
						if !bytes.Equal(g, e) {
							t.Fatalf("block %d differs\n got %x\nwant %x", off/BlockBytes, g, e)
						}
					}
				}
				y := make([]float32, len(c.Dequant))
				Dequantize(y, c.Expect)
				for i, v := range y {
					want := c.Dequant[i]
					if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
						t.Fatalf("dequant[%d] = %g (%#08x), want %g (%#08x)", i, v, math.Float32bits(v), want, math.Float32bits(want))
					}
				}
			})
		}
	}
}

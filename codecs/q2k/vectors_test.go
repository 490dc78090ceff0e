package q2k

import (
	"bytes"
	"math"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
)

// loadVectors reads the Q2_K cases of one vector file.
func loadVectors(t testing.TB, file string) []testdata.GGMLCase {
	t.Helper()
	cases := testdata.GGML(t, file, "Q2_K")
	for _, c := range cases {
		if len(c.Expect) != RowBytes(len(c.Input)) {
			t.Fatalf("%s: case %s: %d bytes for %d weights", file, c.Name, len(c.Expect), len(c.Input))
		}
	}
	return cases
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
		// QuantizeRef takes the vector fit where the CPU has one; the
		// portable fit must give ggml's bytes too.
		{"q2_k_ref.json.gz", func(dst []byte, src []float32, _ int) { quantizeRef(dst, src, false) }},
		{"q2_k_unit.json.gz", func(dst []byte, src []float32, nPerRow int) {
			quantizeImportance(dst, src, unitImportance(nPerRow))
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

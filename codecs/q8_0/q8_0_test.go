package q8_0

import (
	"bytes"
	"math"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
)

// TestReferenceVectors compares Quantize and Dequantize with ggml's own
// quantize_row_q8_0_ref and dequantize_row_q8_0 (testdata/ggml/q8_0_ref.json.gz).
func TestReferenceVectors(t *testing.T) {
	for _, c := range testdata.GGML(t, "q8_0_ref.json.gz", "Q8_0") {
		t.Run(c.Name, func(t *testing.T) {
			got := make([]byte, len(c.Input)/BlockWeights*BlockBytes)
			for r := range c.NRows {
				row := c.Input[r*c.NPerRow : (r+1)*c.NPerRow]
				Quantize(got[r*c.NPerRow/BlockWeights*BlockBytes:], row)
			}
			if !bytes.Equal(got, c.Expect) {
				for i := range got {
					if got[i] != c.Expect[i] {
						t.Fatalf("byte %d (block %d): got %#02x, ggml %#02x", i, i/BlockBytes, got[i], c.Expect[i])
					}
				}
			}
			deq := make([]float32, len(c.Input))
			Dequantize(deq, c.Expect)
			for i, v := range deq {
				if math.Float32bits(v) != math.Float32bits(c.Dequant[i]) && !(v != v && c.Dequant[i] != c.Dequant[i]) {
					t.Fatalf("value %d: dequantised %g, ggml %g", i, v, c.Dequant[i])
				}
			}
		})
	}
}

// TestHandVectors checks cases worked out by hand from ggml's rule.
func TestHandVectors(t *testing.T) {
	x := make([]float32, 32)
	x[0], x[1], x[2], x[3] = 127, -63.5, 0.5, -2.5 // d = 1: halves go away from zero
	got := make([]byte, BlockBytes)
	Quantize(got, x)
	want := append([]byte{0x00, 0x3c, 127, byte(0x100 - 64), 1, byte(0x100 - 3)}, make([]byte, 28)...)
	if !bytes.Equal(got, want) {
		t.Errorf("got % x\nwant % x", got, want)
	}
	Quantize(got, make([]float32, 32)) // an all-zero block: d 0, codes 0
	if !bytes.Equal(got, make([]byte, BlockBytes)) {
		t.Errorf("zero block: % x", got)
	}
}

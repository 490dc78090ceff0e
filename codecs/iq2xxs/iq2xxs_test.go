package iq2xxs

import (
	"testing"
)

func TestRowBytes(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 0},
		{256, 66},
		{2304, 594},
		{5120, 1320},
	} {
		if got := RowBytes(c.n); got != c.want {
			t.Errorf("RowBytes(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestGeometryPanics(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"RowBytes of a partial block", func() { RowBytes(300) }},
		{"RowBytes of a negative count", func() { RowBytes(-256) }},
		{"Quantize into a short dst", func() { Quantize(make([]byte, 65), make([]float32, 256), nil) }},
		{"Quantize of a partial block", func() { Quantize(make([]byte, 66), make([]float32, 300), nil) }},
		{"Quantize with importance not a whole number of blocks", func() {
			Quantize(make([]byte, 132), make([]float32, 512), make([]float32, 300))
		}},
		{"Quantize with rows not a multiple of the importance", func() {
			Quantize(make([]byte, 198), make([]float32, 768), make([]float32, 512))
		}},
		{"Quantize with empty importance", func() { Quantize(make([]byte, 66), make([]float32, 256), []float32{}) }},
		{"Dequantize of a partial block", func() { Dequantize(make([]float32, 256), make([]byte, 67)) }},
		{"Dequantize into a short dst", func() { Dequantize(make([]float32, 255), make([]byte, 66)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			c.f()
		})
	}
}

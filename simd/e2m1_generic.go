// Portable DecodeE2M1 loop: the reference every architecture's kernel must match
// (see "Kernels per architecture" in simd.go), and what runs where there
// is none.

package simd

// decodeE2M1Generic decodes block by block through the magnitudes table.
func decodeE2M1Generic(dst []float32, codes, scales []byte, scaleOf *[256]float32) {
	for i, sb := range scales {
		s := scaleOf[sb]
		d := dst[E2M1Block*i : E2M1Block*(i+1)]
		for j, p := range codes[E2M1Block/2*i : E2M1Block/2*(i+1)] {
			d[2*j] = e2m1(p&15) * s
			d[2*j+1] = e2m1(p>>4) * s
		}
	}
}

// Portable matrix loops: the reference every architecture's kernel must match
// (see "Kernels per architecture" in simd.go), and what runs where there
// is none.

package simd

import (
	"math"
	"sync/atomic"
)

// matMulTGeneric is the portable kernel: one dot product per element.
func matMulTGeneric[W weight](dst []float32, ldd int, x []float32, ldx int, w []W, ldw int, m, n, k int) {
	for i := range m {
		xi := x[i*ldx : i*ldx+k]
		di := dst[i*ldd : i*ldd+n]
		for j := range n {
			di[j] = dotGeneric(xi, w[j*ldw:j*ldw+k])
		}
	}
}

// dotGeneric sums in eight interleaved lanes, as the vector kernels do, so
// that long sums lose less to rounding than one running total would.
func dotGeneric[W weight](a []float32, b []W) float32 {
	b = b[:len(a)]
	var s [8]float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		for l := range s {
			s[l] += a[i+l] * float(b[i+l])
		}
	}
	sum := ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))
	for ; i < len(a); i++ {
		sum += a[i] * float(b[i])
	}
	return sum
}

func widenGeneric(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// peakGeneric is the portable loop: eight independent multiply-add chains.
func peakGeneric(n int) float64 {
	var a [8]float32
	b, c := float32(0.999999), float32(1e-7)
	for range n {
		for i := range a {
			a[i] = a[i]*b + c
		}
	}
	sink.Store(math.Float32bits(a[0]))
	return float64(n) * 8 * 2
}

// sink keeps the generic loop's result alive.
var sink atomic.Uint32

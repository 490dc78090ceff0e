package simd

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useFMA selects the AVX2 + FMA kernels; without them the portable Go
// kernels run.
var useFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// Kernel names the matrix kernel in use: "avx2+fma" or "generic".
func Kernel() string {
	if useFMA {
		return "avx2+fma"
	}
	return "generic"
}

// The tiles of matmul_amd64.s; w points at float32 values, or at uint16
// (bfloat16) values for the kernels whose names end in h.
//
//go:noescape
func dot3x4(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)

//go:noescape
func dot2x4(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)

//go:noescape
func dot1x4(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)

//go:noescape
func dot1x1(x *float32, w unsafe.Pointer, dst *float32, k8 int, add bool)

//go:noescape
func dot3x4h(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)

//go:noescape
func dot2x4h(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)

//go:noescape
func dot1x4h(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)

//go:noescape
func dot1x1h(x *float32, w unsafe.Pointer, dst *float32, k8 int, add bool)

//go:noescape
func widenBF16(dst *float32, src *uint16, n8 int)

func fmaLoop(n int)

// Cache blocking of the vector kernel: a pass multiplies kChunk values of
// up to mChunk rows of x (96 × 2 KiB, resident in L2) by every block of
// four w rows (8 KiB, resident in L1).
const (
	kChunk = 512
	mChunk = 96
)

// tileSet is the tile kernels for one weight type.
type tileSet struct {
	t3, t2, t1 func(x *float32, w unsafe.Pointer, dst *float32, ldx, ldw, ldd, k8 int, add bool)
	t11        func(x *float32, w unsafe.Pointer, dst *float32, k8 int, add bool)
}

var (
	tilesF32  = tileSet{dot3x4, dot2x4, dot1x4, dot1x1}
	tilesBF16 = tileSet{dot3x4h, dot2x4h, dot1x4h, dot1x1h}
)

func matMulT(dst []float32, ldd int, x []float32, ldx int, w []float32, ldw int, m, n, k int) {
	matMulTVector(dst, ldd, x, ldx, w, ldw, m, n, k)
}

func matMulTBF16(dst []float32, ldd int, x []float32, ldx int, w []uint16, ldw int, m, n, k int) {
	matMulTVector(dst, ldd, x, ldx, w, ldw, m, n, k)
}

// matMulTVector is MatMulT on one goroutine. The k range is cut into
// chunks of kChunk: each element is the sum of its chunks' tile results in
// chunk order, then of the products past the last multiple of 8, one by
// one.
func matMulTVector[W weight](dst []float32, ldd int, x []float32, ldx int, w []W, ldw int, m, n, k int) {
	if !useFMA {
		matMulTGeneric(dst, ldd, x, ldx, w, ldw, m, n, k)
		return
	}
	tiles, size := &tilesF32, 4
	if _, bf16 := any(w).([]uint16); bf16 {
		tiles, size = &tilesBF16, 2
	}
	k8 := k &^ 7
	if k8 == 0 {
		for i := range m {
			clear(dst[i*ldd : i*ldd+n])
		}
	}
	bx, bw, bd := 4*ldx, size*ldw, 4*ldd
	for kb := 0; kb < k8; kb += kChunk {
		kl := min(kChunk, k8-kb)
		add := kb > 0
		for i0 := 0; i0 < m; i0 += mChunk {
			i1 := min(m, i0+mChunk)
			j := 0
			for ; j+4 <= n; j += 4 {
				wp := unsafe.Pointer(&w[j*ldw+kb])
				i := i0
				for ; i+3 <= i1; i += 3 {
					tiles.t3(&x[i*ldx+kb], wp, &dst[i*ldd+j], bx, bw, bd, kl, add)
				}
				switch i1 - i {
				case 2:
					tiles.t2(&x[i*ldx+kb], wp, &dst[i*ldd+j], bx, bw, bd, kl, add)
				case 1:
					tiles.t1(&x[i*ldx+kb], wp, &dst[i*ldd+j], bx, bw, bd, kl, add)
				}
			}
			for ; j < n; j++ {
				for i := i0; i < i1; i++ {
					tiles.t11(&x[i*ldx+kb], unsafe.Pointer(&w[j*ldw+kb]), &dst[i*ldd+j], kl, add)
				}
			}
		}
	}
	if k8 == k {
		return
	}
	for i := range m {
		xi := x[i*ldx+k8 : i*ldx+k]
		for j := range n {
			s := dst[i*ldd+j]
			for p, v := range w[j*ldw+k8 : j*ldw+k] {
				s += xi[p] * float(v)
			}
			dst[i*ldd+j] = s
		}
	}
}

func dot(a, b []float32) float32 {
	k8 := len(a) &^ 7
	if !useFMA || k8 == 0 {
		return dotGeneric(a, b)
	}
	var s float32
	dot1x1(&a[0], unsafe.Pointer(&b[0]), &s, k8, false)
	for i := k8; i < len(a); i++ {
		s += a[i] * b[i]
	}
	return s
}

func widen(dst []float32, src []uint16) {
	n8 := len(src) &^ 7
	if !useFMA || n8 == 0 {
		widenGeneric(dst, src)
		return
	}
	widenBF16(&dst[0], &src[0], n8)
	widenGeneric(dst[n8:], src[n8:])
}

// peakIterations runs the register-only FMA loop: each iteration is 12
// eight-lane FMAs, 192 floating-point operations.
func peakIterations(n int) (flops float64) {
	if !useFMA {
		return peakGeneric(n)
	}
	fmaLoop(n)
	return float64(n) * 12 * 8 * 2
}

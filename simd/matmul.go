package simd

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// MatMulT computes the matrix product dst = x · wᵀ of row-major float32
// matrices: dst[i*ldd+j] = Σ_p x[i*ldx+p] · w[j*ldw+p] for i < m, j < n,
// p < k. Both operands are read along their rows, which is how a linear
// layer stores its weight ([out, in]) and its input ([tokens, in]).
//
// The work is spread over GOMAXPROCS goroutines when it is large enough.
// Every element is computed by one goroutine in an order that depends on k
// alone, so the result does not depend on the number of goroutines or on
// where the matrices are cut.
func MatMulT(dst []float32, ldd int, x []float32, ldx int, w []float32, ldw int, m, n, k int) {
	matMulTParallel(dst, ldd, x, ldx, w, ldw, m, n, k, matMulT)
}

// MatMulTBF16 is MatMulT with w in bfloat16 (the raw bits of a
// checkpoint's BF16 matrix): every value is widened to float32 as it is
// loaded, and the result is bit for bit that of MatMulT on the widened
// matrix.
func MatMulTBF16(dst []float32, ldd int, x []float32, ldx int, w []uint16, ldw int, m, n, k int) {
	matMulTParallel(dst, ldd, x, ldx, w, ldw, m, n, k, matMulTBF16)
}

// weight is the element type of a weight matrix: float32 or bfloat16 bits.
type weight interface{ float32 | uint16 }

// float returns a weight element as float32.
func float[W weight](v W) float32 {
	if h, ok := any(v).(uint16); ok {
		return math.Float32frombits(uint32(h) << 16)
	}
	return float32(v)
}

func matMulTParallel[W weight](dst []float32, ldd int, x []float32, ldx int, w []W, ldw int, m, n, k int,
	kernel func(dst []float32, ldd int, x []float32, ldx int, w []W, ldw int, m, n, k int)) {
	checkMat("MatMulT dst", len(dst), ldd, m, n)
	checkMat("MatMulT x", len(x), ldx, m, k)
	checkMat("MatMulT w", len(w), ldw, n, k)
	if m == 0 || n == 0 {
		return
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, m*n*k/parallelMinWork))
	// Split the columns (rows of w, which every goroutine then reads
	// alone) unless they are too few to share out evenly and the rows of x
	// are more.
	colBlocks, rowBlocks := (n+colGrain-1)/colGrain, (m+rowGrain-1)/rowGrain
	if colBlocks >= 4*workers || colBlocks >= rowBlocks {
		parallel(n, colGrain, workers, func(j0, j1 int) {
			kernel(dst[j0:], ldd, x, ldx, w[j0*ldw:], ldw, m, j1-j0, k)
		})
		return
	}
	parallel(m, rowGrain, workers, func(i0, i1 int) {
		kernel(dst[i0*ldd:], ldd, x[i0*ldx:], ldx, w, ldw, i1-i0, n, k)
	})
}

// parallelMinWork is the smallest number of multiply-adds worth a
// goroutine of its own.
const parallelMinWork = 1 << 18

// colGrain and rowGrain are the units the work is cut in: multiples of the
// vector kernel's tile (3 rows of x by 4 of w).
const (
	colGrain = 12
	rowGrain = 12
)

// parallel runs body over [0, n) cut into at most workers ranges of whole
// grains, each on its own goroutine.
func parallel(n, grain, workers int, body func(lo, hi int)) {
	blocks := (n + grain - 1) / grain
	workers = min(workers, blocks)
	if workers <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo := blocks * w / workers * grain
		hi := min(n, blocks*(w+1)/workers*grain)
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lo, hi)
		}()
	}
	wg.Wait()
}

// checkMat panics unless a slice of length size holds a rows x cols matrix
// with the given row stride.
func checkMat(what string, size, stride, rows, cols int) {
	if rows < 0 || cols < 0 || stride < cols {
		panic(fmt.Sprintf("simd: %s: bad shape %dx%d with stride %d", what, rows, cols, stride))
	}
	if rows > 0 && cols > 0 && size < (rows-1)*stride+cols {
		panic(fmt.Sprintf("simd: %s: %d values cannot hold %dx%d with stride %d", what, size, rows, cols, stride))
	}
}

// Dot returns Σ a[i]·b[i]; b must be at least as long as a.
func Dot(a, b []float32) float32 {
	if len(b) < len(a) {
		panic(fmt.Sprintf("simd: Dot of %d and %d values", len(a), len(b)))
	}
	return dot(a, b[:len(a)])
}

// WidenBF16 converts bfloat16 values (the high halves of float32s) to
// float32; dst must be at least as long as src.
func WidenBF16(dst []float32, src []uint16) {
	widen(dst[:len(src)], src)
}

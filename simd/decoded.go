package simd

import "runtime"

// decodedBlockBytes is the size of the block of decoded weight rows each
// goroutine of MatMulTDecoded keeps: small enough to stay in a core's
// L2 cache between being written and being multiplied.
const decodedBlockBytes = 256 << 10

// MatMulTDecoded is MatMulT for a weight stored in some compact form
// (FP8 or MXFP4 codes with their scales): decode(w, j0, j1) must write
// rows j0 to j1 of the weight, as float32 [j1-j0, k], into w, and may be
// called from several goroutines at once for disjoint ranges. Each
// goroutine decodes its columns a block of rows at a time into a buffer
// of its own and multiplies it while it is in cache, so the whole matrix
// is never widened to float32 in memory. The result is bit for bit that
// of MatMulT on the decoded matrix: each element is summed as MatMulT
// sums it, whatever block its column falls in.
func MatMulTDecoded(dst []float32, ldd int, x []float32, ldx int, m, n, k int, decode func(w []float32, j0, j1 int)) {
	checkMat("MatMulTDecoded dst", len(dst), ldd, m, n)
	checkMat("MatMulTDecoded x", len(x), ldx, m, k)
	if m == 0 || n == 0 {
		return
	}
	block := max(colGrain, decodedBlockBytes/4/max(k, 1)/colGrain*colGrain)
	// Decoding is about as much work per weight as one row of x.
	workers := min(runtime.GOMAXPROCS(0), max(1, (m+1)*n*k/parallelMinWork))
	parallel(n, colGrain, workers, func(j0, j1 int) {
		buf := make([]float32, min(block, j1-j0)*k)
		for b0 := j0; b0 < j1; b0 += block {
			b1 := min(j1, b0+block)
			w := buf[:(b1-b0)*k]
			decode(w, b0, b1)
			matMulT(dst[b0:], ldd, x, ldx, w, k, m, b1-b0, k)
		}
	})
}

//go:build !amd64

package iq2xxs

// haveVectorSearch says whether a vector projection runs: not on this
// architecture.
const haveVectorSearch = false

func projectAVX2(xval, waux *[32]float32, ids, scales *float32, n int, codeMap *int32, listAt *uint32, lists *uint16, codes *[4]uint16) {
	panic("iq2xxs: no vector projection on this architecture")
}

func trialSumsAVX2(weight, xval *[32]float32, codes *[4][16]uint32, sumqx, sumq2 *[16]float32) {
	panic("iq2xxs: no vector sums on this architecture")
}

func qpErrorsAVX2(x, w *[32]float32, iscale, scale, mse *[8]float32) {
	panic("iq2xxs: no vector errors on this architecture")
}

func weightsAVX2(x, qw *[32]float32, sigma2 float32, weight, waux, xval *[32]float32) uint32 {
	panic("iq2xxs: no vector weights on this architecture")
}

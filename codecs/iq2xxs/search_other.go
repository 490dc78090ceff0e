//go:build !amd64

package iq2xxs

// haveVectorSearch says whether a vector projection runs: not on this
// architecture.
const haveVectorSearch = false

func projectAVX2(xval, waux *[32]float32, id, scale float32, codeMap *int32, listAt *uint32, lists *uint16, codes *[4]uint16) {
	panic("iq2xxs: no vector projection on this architecture")
}

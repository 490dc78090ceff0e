//go:build !amd64

package q2k

// haveVectorFit says whether a vector form of the reference path's fit
// runs: not on this architecture.
const haveVectorFit = false

func fitRangeMADAVX2(x, w *[16][8]float32, steps *float32, nsteps int, scale, negMin *[8]float32, levels *[16][8]float32) {
	panic("q2k: no vector fit on this architecture")
}

func requantizeAVX2(x *[BlockWeights]float32, dm, dd *[subBlocks]float32, codes *[subBlocks]uint32) {
	panic("q2k: no vector requantisation on this architecture")
}

package q2k

import "golang.org/x/sys/cpu"

// haveVectorFit says whether the AVX2 form of the reference path's fit runs.
var haveVectorFit = cpu.X86.HasAVX2

// fitRangeMADAVX2 is fitRange with mad set for eight sub-blocks at once,
// one per lane: x[i][j] and w[i][j] are weight i of sub-block j, steps the
// nsteps trial numerators. It returns each sub-block's scale, negated min
// and levels (as float32, levels[i][j] the level of weight i of sub-block
// j), bit for bit what fitRange returns. It evaluates every trial, where
// fitRange skips a trial whose levels repeat the previous one's; such a
// trial cannot be taken (see fitRange), so the results agree.
//
//go:noescape
func fitRangeMADAVX2(x, w *[16][8]float32, steps *float32, nsteps int, scale, negMin *[8]float32, levels *[16][8]float32)

// requantizeAVX2 sets codes[j] to levelCodes(1, t) for t[i] = (x[16j+i] +
// dm[j]) / dd[j], each weight's division as requantize rounds it.
//
//go:noescape
func requantizeAVX2(x *[BlockWeights]float32, dm, dd *[subBlocks]float32, codes *[subBlocks]uint32)

package iq2xxs

import "golang.org/x/sys/cpu"

// haveVectorSearch says whether the AVX2 projection runs.
var haveVectorSearch = cpu.X86.HasAVX2

// projectAVX2 is projectGroups for n trials: trial t's inverse scale
// ids[t] and scale scales[t], its four codes into codes[t]. It works on the
// four groups of xval and waux eight coordinates or eight neighbour
// candidates at a time: each magnitude rounded to its level as ggml rounds
// it, and for a code off the grid (codeMap entry negative) the first of the
// candidates at listAt's place in lists with the smallest distance below
// the largest float32 (the first where none is). The distance terms
// waux*(s*q - xval)^2 are rounded as the portable search rounds them and
// each candidate's eight are added in coordinate order.
//
//go:noescape
func projectAVX2(xval, waux *[32]float32, ids, scales *float32, n int, codeMap *int32, listAt *uint32, lists *uint16, codes *[4]uint16)

// trialSumsAVX2 computes, for up to 16 trials at once, the sums sums
// computes: lane t of sumqx and sumq2 from the level codes codes[k][t] of
// groups k = 0..3, accumulated in index order.
//
//go:noescape
func trialSumsAVX2(weight, xval *[32]float32, codes *[4][16]uint32, sumqx, sumq2 *[16]float32)

// qpErrorsAVX2 computes the weighted squared errors of scaleGuess's eight
// trial scales at once, each summed in index order.
//
//go:noescape
func qpErrorsAVX2(x, w *[32]float32, iscale, scale, mse *[8]float32)

// weightsAVX2 computes prepare's weights and their square roots, eight at a
// time: weight = sqrt(sigma2 + x*x) * qw, waux = sqrt(weight), and the
// magnitudes xval, returning the bits of the weights that count as
// negative, !(x >= 0).
//
//go:noescape
func weightsAVX2(x, qw *[32]float32, sigma2 float32, weight, waux, xval *[32]float32) uint32

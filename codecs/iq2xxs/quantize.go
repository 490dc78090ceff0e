package iq2xxs

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/dsfs/dsfs/codecs/internal/ggmlfp16"
)

// groupMaxEps is ggml's GROUP_MAX_EPS: sub-blocks whose largest magnitude is
// below it are stored empty.
const groupMaxEps = 1e-15

// levelValues maps a level index to the odd integer 2l+1 the quantiser fits
// (index 3 never occurs in a code it looks up).
var levelValues = [4]float32{1, 3, 5, 7}

// quantizeBlock is quantize_row_iq2_xxs_impl for one 256-weight block; qw is
// the block's slice of the importance vector, nil for unit importance.
// With vector set the CPU's vector unit, where it has one, runs the square
// roots, the trial projections and neighbour searches and the trials' sums
// and errors; the bytes are the same.
func quantizeBlock(dst *[BlockBytes]byte, x *[BlockWeights]float32, qw *[BlockWeights]float32, t *searchTables, vector bool) {
	var sumx2 float32
	for _, v := range x {
		sumx2 += float32(v * v)
	}
	sigma2 := sumx2 / BlockWeights

	var (
		scales   [8]float32
		q2       [16]uint32
		maxScale float32
		sb       subBlock
	)
	for ib := range 8 {
		var w *[32]float32
		if qw != nil {
			w = (*[32]float32)(qw[32*ib:])
		}
		sb.prepare((*[32]float32)(x[32*ib:]), w, sigma2, vector)
		scale, indices, signs := sb.quantize(t, vector)
		for k := range 4 {
			q2[2*ib] |= uint32(indices[k]) << (8 * k)
			q2[2*ib+1] |= uint32(signs[k]) << (7 * k)
		}
		scales[ib] = scale
		if !(maxScale > scale) {
			maxScale = scale
		}
	}

	if maxScale == 0 {
		clear(dst[:])
		return
	}
	d := maxScale / 31
	binary.LittleEndian.PutUint16(dst[0:], ggmlfp16.Bits(d))
	// The sub-block scales are coded against the unrounded d, not its fp16
	// value.
	id := 1 / d
	for ib, s := range scales {
		l := min(15, max(0, nearestInt(0.5*(float32(id*s)-1))))
		q2[2*ib+1] |= uint32(l) << 28
	}
	for i, w := range q2 {
		binary.LittleEndian.PutUint32(dst[2+4*i:], w)
	}
}

// unitImportance is 32 ones, the vector form of a nil importance.
var unitImportance = [32]float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

// subBlock is the quantiser's state for 32 weights: four groups of eight,
// each coded as one grid point, seven sign bits and the shared scale.
type subBlock struct {
	weight [32]float32 // importance times sqrt(sigma2 + x^2)
	waux   [32]float32 // sqrt(weight), the metric of the neighbour search
	xval   [32]float32 // magnitudes, one per group possibly negated for parity
	signs  [4]uint8    // per group, the seven stored sign bits
}

// prepare loads the weights xb with importance qw (nil for ones): their
// metric, magnitudes and signs. The format stores seven sign bits per group
// and implies an even number of negatives, so a group with an odd number
// gives the weight with the smallest weight*x^2 the wrong sign: its
// magnitude is negated instead.
// With vector set the square roots run on the vector unit where the CPU has
// one; multiplying by an importance of 1 changes no bits, so nil importance
// is a vector of ones there.
func (sb *subBlock) prepare(xb, qw *[32]float32, sigma2 float32, vector bool) {
	// neg: bit i set where weight i counts as negative, !(x >= 0), so
	// -0.0 counts as positive and keeps its sign in xval.
	var neg uint32
	if vector && haveVectorSearch {
		if qw == nil {
			qw = &unitImportance
		}
		neg = weightsAVX2(xb, qw, sigma2, &sb.weight, &sb.waux, &sb.xval)
	} else {
		for i, v := range xb {
			w := sqrt32(sigma2 + float32(v*v))
			if qw != nil {
				w *= qw[i]
			}
			sb.weight[i] = w
			sb.waux[i] = sqrt32(w)
			if v >= 0 {
				sb.xval[i] = v
			} else {
				sb.xval[i] = -v
				neg |= 1 << i
			}
		}
	}
	for k := range 4 {
		s := uint8(neg >> (8 * k))
		if bits.OnesCount8(s)%2 == 1 {
			imin := 8 * k
			least := sb.weight[imin] * xb[imin] * xb[imin]
			for i := 8*k + 1; i < 8*k+8; i++ {
				if ax := sb.weight[i] * xb[i] * xb[i]; ax < least {
					least, imin = ax, i
				}
			}
			sb.xval[imin] = -sb.xval[imin]
			s ^= 1 << (imin - 8*k)
		}
		sb.signs[k] = s & 127
	}
}

// quantize fits the prepared sub-block: its scale, the grid index and the
// stored sign bits of each group.
func (sb *subBlock) quantize(t *searchTables, vector bool) (scale float32, indices [4]uint8, signs [4]uint8) {
	signs = sb.signs
	m := sb.xval[0]
	for _, v := range sb.xval[1:] {
		if !(m > v) {
			m = v
		}
	}
	if m < groupMaxEps {
		return 0, indices, [4]uint8{}
	}
	scale = sb.scaleGuess(vector)
	effMax := scale * 3
	if effMax <= 0 {
		return 0, indices, [4]uint8{}
	}

	// codes holds the level code of each group's chosen grid point. Only
	// when every fit below fails (non-finite metric, where ggml aborts) is
	// its initial grid point 0 stored.
	var codes [4]uint16
	var best float32
	// The thirteen trials are independent until their sums are compared, so
	// the vector path computes all of them first and their sums side by
	// side, each still in ggml's order; the comparisons then run in ggml's
	// order of trials.
	const trials = 13
	var (
		trial        [trials][4]uint16
		sumqx, sumq2 [16]float32
	)
	var ids, scales [trials]float32
	for is := -6; is <= 6; is++ {
		ids[is+6] = (5 + float32(float32(is)*0.1)) / effMax
		scales[is+6] = 1 / ids[is+6]
	}
	sb.projectTrials(t, ids[:], scales[:], trial[:], vector)
	if vector && haveVectorSearch {
		var lanes [4][16]uint32
		for n, c := range trial {
			for k := range c {
				lanes[k][n] = uint32(c[k])
			}
		}
		trialSumsAVX2(&sb.weight, &sb.xval, &lanes, &sumqx, &sumq2)
	} else {
		for n := range trial {
			sumqx[n], sumq2[n] = sb.sums(&trial[n])
		}
	}
	for n := range trials {
		if sumq2[n] > 0 && sumqx[n]*sumqx[n] > best*sumq2[n] {
			scale = sumqx[n] / sumq2[n]
			best = scale * sumqx[n]
			codes = trial[n]
		}
	}
	if scale > 0 {
		id := 1 / scale
		sb.projectGroups(t, id, scale, &codes, vector)
		if sumqx, sumq2 := sb.sums(&codes); sumq2 > 0 {
			scale = sumqx / sumq2
		}
	}
	if scale < 0 {
		// ggml: "should never happen". The stored scale is unsigned, so
		// the signs flip instead.
		scale = -scale
		for k := range signs {
			signs[k] = ^signs[k] & 127
		}
	}
	for k, c := range codes {
		indices[k] = uint8(t.codeMap[c])
	}
	return scale, indices, signs
}

// projectGroups sets codes to the four groups' level codes for the inverse
// scale id and scale, as project does. With vector set it runs the vector
// form where the CPU has one; the codes are the same.
func (sb *subBlock) projectGroups(t *searchTables, id, scale float32, codes *[4]uint16, vector bool) {
	var one [1][4]uint16
	sb.projectTrials(t, []float32{id}, []float32{scale}, one[:], vector)
	*codes = one[0]
}

// projectTrials is projectGroups for trial n's ids[n] and scales[n] into
// codes[n], the vector form doing every trial in one call.
func (sb *subBlock) projectTrials(t *searchTables, ids, scales []float32, codes [][4]uint16, vector bool) {
	if vector && haveVectorSearch {
		projectAVX2(&sb.xval, &sb.waux, &ids[0], &scales[0], len(codes), &t.codeMap[0], &t.listAt[0], &t.lists[0], &codes[0])
		return
	}
	for n := range codes {
		for k := range codes[n] {
			codes[n][k] = sb.project(t, k, ids[n], scales[n])
		}
	}
}

// project returns the level code of group k's grid point for the inverse
// scale id: each magnitude rounded to the nearest level, and when that code
// is off the grid, the best of its listed neighbours at scale.
func (sb *subBlock) project(t *searchTables, k int, id, scale float32) uint16 {
	xval := (*[8]float32)(sb.xval[8*k:])
	var u uint16
	for i, v := range xval {
		l := min(2, max(0, nearestInt(0.5*(float32(id*v)-1))))
		u |= uint16(l) << (2 * i)
	}
	if t.codeMap[u] >= 0 {
		return u
	}
	return t.bestNeighbour(u, xval, (*[8]float32)(sb.waux[8*k:]), scale)
}

// sums returns sum(weight*xval*q) and sum(weight*q*q) over the sub-block
// for the groups' level codes, q = 2l+1, accumulated in index order.
func (sb *subBlock) sums(codes *[4]uint16) (sumqx, sumq2 float32) {
	for k, c := range codes {
		for i := range 8 {
			q := levelValues[c>>(2*i)&3]
			w := sb.weight[8*k+i]
			sumqx += float32(float32(w*sb.xval[8*k+i]) * q)
			sumq2 += float32(float32(w*q) * q)
		}
	}
	return sumqx, sumq2
}

// bestNeighbour is iq2_find_best_neighbour: of the grid points listed for
// the off-grid code u, the first with the smallest sum of
// waux*(scale*q - xval)^2, as a level code. If no point has a distance below
// the largest float32 (ggml aborts there), it returns the first one listed.
func (t *searchTables) bestNeighbour(u uint16, xval, waux *[8]float32, scale float32) uint16 {
	// Each coordinate takes one of three levels, so the 24 possible terms
	// are computed once and each candidate only adds up its eight, in
	// ggml's order; the first addition is tabulated too. ggml starts from
	// 0 + term, which differs only in the sign of a zero sum, and that
	// compares the same.
	var terms [8][3]float32
	s1, s3, s5 := scale, float32(scale*3), float32(scale*5)
	for j, x := range xval {
		w := waux[j]
		d := s1 - x
		terms[j][0] = float32(float32(w*d) * d)
		d = s3 - x
		terms[j][1] = float32(float32(w*d) * d)
		d = s5 - x
		terms[j][2] = float32(float32(w*d) * d)
	}
	var first [16]float32 // by the levels of coordinates 0 and 1
	for a := range 3 {
		for b := range 3 {
			first[a|b<<2] = terms[0][a] + terms[1][b]
		}
	}
	off := int(-t.codeMap[u] - 1)
	list := t.neighbours[off+1 : off+1+int(t.neighbours[off])]
	bestCode := gridCodes[uint8(list[0])]
	bestD2 := float32(math.MaxFloat32)
	for _, k := range list {
		g := gridCodes[uint8(k)]
		d2 := first[g&15] + terms[2][g>>4&3] + terms[3][g>>6&3] +
			terms[4][g>>8&3] + terms[5][g>>10&3] + terms[6][g>>12&3] + terms[7][g>>14&3]
		if d2 < bestD2 {
			bestD2, bestCode = d2, g
		}
	}
	return bestCode
}

// scaleGuess is ggml's make_qp_quants(32, 4, xval, L, weight): a first
// least-squares scale for xval ~ scale*l with levels 0..4. It keeps ggml's
// quirks: levels are stored as uint8, so a negative level (from the
// parity-flipped magnitude) wraps to 255 in the stored values while the
// sums that created it used the signed level. make_qp_quants returns 0 for
// a largest value below groupMaxEps; the caller has already set such
// sub-blocks aside.
func (sb *subBlock) scaleGuess(vector bool) float32 {
	const nmax = 4
	x, w := &sb.xval, &sb.weight
	var m float32
	for _, v := range x {
		if !(m > v) {
			m = v
		}
	}
	iscale := nmax / m
	scale := 1 / iscale
	var bestMSE float32
	for i, v := range x {
		l := float32(uint8(nearestInt(iscale * v)))
		diff := v - float32(scale*l)
		bestMSE += float32(float32(w[i]*diff) * diff)
	}
	if vector && haveVectorSearch {
		// The eight trials side by side, each error still summed in
		// ggml's order, then compared in ggml's order.
		var iscales, scales, mse [8]float32
		for n, is := range [8]int{-4, -3, -2, -1, 1, 2, 3, 4} {
			iscales[n] = (float32(0.1*float32(is)) + nmax) / m
			scales[n] = 1 / iscales[n]
		}
		qpErrorsAVX2(x, w, &iscales, &scales, &mse)
		for n, e := range mse {
			if e < bestMSE {
				bestMSE, iscale = e, iscales[n]
			}
		}
	} else {
		for is := -4; is <= 4; is++ {
			if is == 0 {
				continue
			}
			iscaleIs := (float32(0.1*float32(is)) + nmax) / m
			if mse := qpError(x, w, iscaleIs, 1/iscaleIs); mse < bestMSE {
				bestMSE, iscale = mse, iscaleIs
			}
		}
	}
	var levels [32]uint8
	var sumlx, suml2 float32
	for i, v := range x {
		l := min(nmax, nearestInt(iscale*v))
		levels[i] = uint8(l)
		fl := float32(l)
		sumlx += float32(float32(w[i]*v) * fl)
		suml2 += float32(float32(w[i]*fl) * fl)
	}
	for range 5 {
		changed := false
		for i, v := range x {
			li := float32(levels[i])
			slx := sumlx - float32(float32(w[i]*v)*li)
			sl2 := suml2 - float32(float32(w[i]*li)*li)
			if slx > 0 && sl2 > 0 {
				newL := min(nmax, nearestInt(v*sl2/slx))
				if newL != int32(levels[i]) {
					fl := float32(newL)
					slx += float32(float32(w[i]*v) * fl)
					sl2 += float32(float32(w[i]*fl) * fl)
					if slx*slx*suml2 > sumlx*sumlx*sl2 {
						levels[i] = uint8(newL)
						sumlx, suml2 = slx, sl2
						changed = true
					}
				}
			}
		}
		if !changed {
			break
		}
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// qpError is the weighted squared error of one of scaleGuess's trials:
// levels min(4, nearest_int(iscale*x)) at scale, summed in index order.
func qpError(x, w *[32]float32, iscale, scale float32) float32 {
	var mse float32
	for i, v := range x {
		l := float32(min(4, nearestInt(iscale*v)))
		diff := v - float32(scale*l)
		mse += float32(float32(w[i]*diff) * diff)
	}
	return mse
}

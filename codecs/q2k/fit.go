package q2k

// Trial numerators rmin + rdelta*is + nmax of ggml's scale search, computed
// once in ggml's float32 order: make_qkx2_quants(rmin -0.5, rdelta 0.1,
// nstep 15) on the reference path, make_qkx3_quants(rmin -0.9, rdelta 0.05,
// nstep 36) on the importance path, both with nmax 3.
var (
	refSteps        = trialSteps(-0.5, 0.1, 15)
	importanceSteps = trialSteps(-0.9, 0.05, 36)
)

func trialSteps(rmin, rdelta float32, nstep int) []float32 {
	s := make([]float32, nstep+1)
	for is := range s {
		s[is] = float32(rmin+float32(rdelta*float32(is))) + 3
	}
	return s
}

// fitRange fits x[i] ≈ scale*l[i] - negMin with levels l[i] in 0..3 and
// negMin >= 0, minimising the w-weighted absolute (mad) or squared error.
// It is ggml's make_qkx2_quants and make_qkx3_quants with n = 16, nmax = 3:
// the two differ only in their early exit, max == min against max <= min,
// which agree because max >= min unless x[0] is NaN, and then both fail.
// The levels come back packed, level i in bits 2i..2i+1 of code.
//
// A trial whose levels equal the previous trial's computes exactly the same
// fit and error, which cannot be strictly below the best so far, so it is
// skipped without changing the result.
func fitRange(x, w *[16]float32, steps []float32, mad bool) (scale, negMin float32, code uint32) {
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < 16; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		return 0, -lo, 0
	}

	// xm caches x - min for the current min, which an accepted trial moves.
	var xm [16]float32
	for i, v := range x {
		xm[i] = v - lo
	}
	iscale := 3 / (hi - lo)
	code = levelCodes(iscale, &xm)
	scale = 1 / iscale
	best := fitError(x, w, code, scale, lo, mad)

	var prev uint32
	havePrev := false
	for _, num := range steps {
		c := levelCodes(num/(hi-lo), &xm)
		if havePrev && c == prev {
			continue
		}
		prev, havePrev = c, true

		var sl, sl2, sxl float32
		cc := c
		for i := range 16 {
			fl := levels[cc&3]
			cc >>= 2
			wl := float32(w[i] * fl)
			sl += wl
			sl2 += float32(wl * fl)
			sxl += float32(wl * x[i])
		}
		det := float32(sumW*sl2) - float32(sl*sl)
		if !(det > 0) {
			continue
		}
		ts := (float32(sumW*sxl) - float32(sumX*sl)) / det
		tm := (float32(sl2*sumX) - float32(sl*sxl)) / det
		if tm > 0 {
			tm = 0
			ts = sxl / sl2
		}
		if cur := fitError(x, w, c, ts, tm, mad); cur < best {
			best, scale, lo, code = cur, ts, tm, c
			for i, v := range x {
				xm[i] = v - lo
			}
		}
	}
	return scale, -lo, code
}

// fitError is the w-weighted absolute (mad) or squared error of
// scale*l[i] + m against x[i], l packed as in code, summed in order.
func fitError(x, w *[16]float32, code uint32, scale, m float32, mad bool) float32 {
	// The four possible fitted values, each rounded as ggml rounds it.
	var fit [4]float32
	for l, fl := range levels {
		fit[l] = float32(scale*fl) + m
	}
	var e float32
	if mad {
		for i := range 16 {
			e += float32(w[i] * abs32(fit[code&3]-x[i]))
			code >>= 2
		}
		return e
	}
	for i := range 16 {
		diff := fit[code&3] - x[i]
		e += float32(w[i] * float32(diff*diff))
		code >>= 2
	}
	return e
}

// groupMaxEps is ggml's GROUP_MAX_EPS: below it a group counts as all zero.
const groupMaxEps = 1e-15

// fitScale fits x[i] ≈ scale*l[i] with l[i] in 0..15, weighted by qw,
// storing the levels in l. It is ggml's make_qp_quants with n = 16,
// nmax = 15, including its quirks: levels are stored as uint8 and so wrap
// when negative, while the running sums use the signed level.
func fitScale(x *[16]float32, l *[16]uint8, qw *[16]float32) float32 {
	const nmax = 15
	var mx float32
	for _, v := range x {
		if !(mx > v) { // ggml's MAX(mx, v), NaN included
			mx = v
		}
	}
	if mx < groupMaxEps {
		*l = [16]uint8{}
		return 0
	}
	iscale := nmax / mx
	for i, v := range x {
		l[i] = uint8(nearestInt(float32(iscale * v)))
	}
	scale := 1 / iscale
	var best float32
	for i, v := range x {
		diff := v - float32(scale*float32(l[i]))
		best += float32(float32(qw[i]*diff) * diff)
	}
	for is := -4; is <= 4; is++ {
		if is == 0 {
			continue
		}
		isc := (float32(float32(0.1)*float32(is)) + nmax) / mx
		sc := 1 / isc
		var mse float32
		for i, v := range x {
			q := min(nmax, nearestInt(float32(isc*v)))
			diff := v - float32(sc*float32(q))
			mse += float32(float32(qw[i]*diff) * diff)
		}
		if mse < best {
			best, iscale = mse, isc
		}
	}

	var sumlx, suml2 float32
	for i, v := range x {
		q := min(nmax, nearestInt(float32(iscale*v)))
		l[i] = uint8(q)
		fq := float32(q)
		sumlx += float32(float32(qw[i]*v) * fq)
		suml2 += float32(float32(qw[i]*fq) * fq)
	}
	for range 5 {
		changed := false
		for i, v := range x {
			wi, li := qw[i], float32(l[i])
			slx := sumlx - float32(float32(wi*v)*li)
			sl2 := suml2 - float32(float32(wi*li)*li)
			if !(slx > 0 && sl2 > 0) {
				continue
			}
			q := min(nmax, nearestInt(float32(v*sl2)/slx))
			if q == int32(l[i]) {
				continue
			}
			fq := float32(q)
			slx += float32(float32(wi*v) * fq)
			sl2 += float32(float32(wi*fq) * fq)
			if float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
				l[i], sumlx, suml2 = uint8(q), slx, sl2
				changed = true
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

package q2k

import (
	"math"

	"github.com/dsfs/dsfs/codecs/internal/ggmlfp16"
)

// This file is a literal, unoptimised transcription of ggml's Q2_K
// quantisers (testdata/ggml/ALGORITHM.md sections 1.3-1.5): every trial of
// the scale search is evaluated in full, levels live in a byte array. The
// tests compare the package against it on inputs the reference vectors do
// not cover, which checks that the shortcuts in fitRange (skipping repeated
// trials, packed levels, hoisted products) change no bit.

// oracleMakeQKX is make_qkx2_quants/make_qkx3_quants for n = 16, nmax = 3.
func oracleMakeQKX(x, w []float32, l []uint8, rmin, rdelta float32, nstep int, mad bool) (scale, theMin float32) {
	const nmax = 3
	mn, mx := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < 16; i++ {
		if x[i] < mn {
			mn = x[i]
		}
		if x[i] > mx {
			mx = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx <= mn || mx == mn {
		for i := range 16 {
			l[i] = 0
		}
		return 0, -mn
	}
	clamp := func(q int32) int32 { return max(0, min(nmax, q)) }
	errTerm := func(w, diff float32) float32 {
		if mad {
			return float32(w * float32(math.Abs(float64(diff))))
		}
		return float32(w * float32(diff*diff))
	}
	iscale := nmax / (mx - mn)
	scale = 1 / iscale
	var best float32
	for i := range 16 {
		l[i] = uint8(clamp(nearestInt(float32(iscale * float32(x[i]-mn)))))
		diff := float32(float32(scale*float32(l[i]))+mn) - x[i]
		best += errTerm(w[i], diff)
	}
	var laux [16]uint8
	for is := 0; is <= nstep; is++ {
		iscale = float32(rmin+float32(rdelta*float32(is))+nmax) / (mx - mn)
		var sl, sl2, sxl float32
		for i := range 16 {
			q := clamp(nearestInt(float32(iscale * float32(x[i]-mn))))
			laux[i] = uint8(q)
			fq := float32(q)
			sl += float32(w[i] * fq)
			sl2 += float32(float32(w[i]*fq) * fq)
			sxl += float32(float32(w[i]*fq) * x[i])
		}
		d := float32(sumW*sl2) - float32(sl*sl)
		if d > 0 {
			ts := (float32(sumW*sxl) - float32(sumX*sl)) / d
			tm := (float32(sl2*sumX) - float32(sl*sxl)) / d
			if tm > 0 {
				tm = 0
				ts = sxl / sl2
			}
			var cur float32
			for i := range 16 {
				diff := float32(float32(ts*float32(laux[i]))+tm) - x[i]
				cur += errTerm(w[i], diff)
			}
			if cur < best {
				copy(l, laux[:])
				best, scale, mn = cur, ts, tm
			}
		}
	}
	return scale, -mn
}

// oracleFinish re-quantises with the fp16 super-scales and packs the block.
func oracleFinish(b []byte, x []float32, l []uint8, d, dmin uint16) {
	df, mf := ggmlfp16.Float32(d), ggmlfp16.Float32(dmin)
	for j := range 16 {
		dd := df * float32(b[j]&0xF)
		if dd == 0 {
			continue
		}
		dm := float32(mf * float32(b[j]>>4))
		for ii := range 16 {
			q := nearestInt((x[16*j+ii] + dm) / dd)
			l[16*j+ii] = uint8(max(0, min(3, q)))
		}
	}
	for j := 0; j < 256; j += 128 {
		for i := range 32 {
			b[16+j/4+i] = l[j+i] | l[j+i+32]<<2 | l[j+i+64]<<4 | l[j+i+96]<<6
		}
	}
	b[80], b[81], b[82], b[83] = byte(d), byte(d>>8), byte(dmin), byte(dmin>>8)
}

func oracleQuantizeRef(dst []byte, src []float32) {
	for len(src) > 0 {
		x, b := src[:256], dst[:84]
		var l [256]uint8
		var scales, mins [16]float32
		var w [16]float32
		var maxScale, maxMin float32
		for j := range 16 {
			for i := range 16 {
				w[i] = float32(math.Abs(float64(x[16*j+i])))
			}
			scales[j], mins[j] = oracleMakeQKX(x[16*j:16*j+16], w[:], l[16*j:], -0.5, 0.1, 15, true)
			if scales[j] > maxScale {
				maxScale = scales[j]
			}
			if mins[j] > maxMin {
				maxMin = mins[j]
			}
		}
		var d, dmin uint16
		for j := range 16 {
			b[j] = 0
		}
		if maxScale > 0 {
			iscale := 15 / maxScale
			for j := range 16 {
				b[j] = uint8(nearestInt(float32(iscale * scales[j])))
			}
			d = ggmlfp16.Bits(maxScale / 15)
		}
		if maxMin > 0 {
			iscale := 15 / maxMin
			for j := range 16 {
				b[j] |= uint8(nearestInt(float32(iscale*mins[j])) << 4)
			}
			dmin = ggmlfp16.Bits(maxMin / 15)
		}
		oracleFinish(b, x, l[:], d, dmin)
		dst, src = dst[84:], src[256:]
	}
}

func oracleQuantizeImportance(dst []byte, src, importance []float32) {
	for len(src) > 0 {
		for blk := 0; blk < len(importance); blk += 256 {
			x, b, qw := src[:256], dst[:84], importance[blk:blk+256]
			var l [256]uint8
			var scales, mins, sw, w [16]float32
			var ls, lm [16]uint8
			var sumx2 float32
			for _, v := range x {
				sumx2 += float32(v * v)
			}
			sigma2 := float32(sumx2 / 256)
			for j := range 16 {
				for i := range 16 {
					v := x[16*j+i]
					w[i] = float32(qw[16*j+i] * float32(math.Sqrt(float64(sigma2+float32(v*v)))))
					sw[j] += w[i]
				}
				scales[j], mins[j] = oracleMakeQKX(x[16*j:16*j+16], w[:], l[16*j:], -0.9, 0.05, 36, false)
			}
			d, dmin := ggmlfp16.Bits(fitScale(&scales, &ls, &sw)), ggmlfp16.Bits(fitScale(&mins, &lm, &sw))
			for j := range 16 {
				b[j] = ls[j] | lm[j]<<4
			}
			oracleFinish(b, x, l[:], d, dmin)
			dst, src = dst[84:], src[256:]
		}
	}
}

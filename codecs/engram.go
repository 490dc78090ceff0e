package codecs

import (
	"bytes"
	"math"

	"github.com/dsfs/dsfs/simd"
)

// EngramCounts counts the 32-blocks of an Engram table transcoded by
// EngramFP4.
type EngramCounts struct {
	Blocks    int64 `json:"blocks"`
	NaNBlocks int64 `json:"nan_blocks"` // a NaN element or scale: scale 255, codes 0
}

// For a block with scale byte s whose largest magnitude byte is top,
// EngramFP4's exponent e makes x = v/2^e = E4M3(w) x 2^d with d = s-127-e,
// and d always lies in [engramMinShift, engramMaxShift], so one code table
// per d serves every block. With c = ceil(log2(|E4M3(top)|/6)) in [-11, 7]:
// usually e = c+s-127 and d = -c; at the floor (e = -126 > c+s-127)
// d = s-1 lies in [-1, -c); at the cap (e = 127 < c+s-127) d = s-254 lies in
// (-c, 0]. TestEngramExhaustive meets every (s, top) pair, so an index
// outside the tables would panic there.
const (
	engramMinShift = -7
	engramMaxShift = 11
)

var (
	// e4m3Ceil is ceil(log2(|E4M3(b)|/6)) for b in [1, 0x7E].
	e4m3Ceil [128]int8
	// engramCode is the E2M1 code of E4M3(b) x 2^d, at index d-engramMinShift.
	engramCode [engramMaxShift - engramMinShift + 1][256]byte

	// The tables of EngramCosine, whose block sums are exact integers:
	// e4m3Mag and e4m3Mag2 are a = |E4M3(b)| x 2^9 and a^2 for b < 0x7F,
	// e2m1Signed is c = 2 x E2M1(code), and e2m1PairSq the sum of c^2 over
	// the two codes of a byte.
	e4m3Mag, e4m3Mag2 [128]int64
	e2m1Signed        = [16]int64{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
	e2m1PairSq        [256]int64

	// engramShifts is e4m3Ceil as simd.Shifts: the new scale byte of a
	// block is its source scale byte plus the shift of its maximum, as
	// engramScale computes it, for simd.RescaleE8M0 to find many at once.
	engramShifts simd.Shifts

	// engramSteps is engramCode as simd.Steps for the vector kernel, which
	// agrees with it on every byte but NaN.
	engramSteps [len(engramCode)]simd.Steps
	// engramVector selects the vector path of EngramFP4 and EngramScales;
	// tests clear it to run the per-block loop over engramCode.
	engramVector = simd.VectorBlocks()
)

// e2m1Mid4 holds 4 x the midpoints between consecutive E2M1 magnitudes
// 0, .5, 1, 1.5, 2, 3, 4, 6: the integers whose comparison decides a code.
var e2m1Mid4 = [7]int64{1, 3, 5, 7, 10, 14, 20}

func init() {
	for b := range e4m3NaN {
		m, q := e4m3Int(byte(b))
		e4m3Mag[b] = int64(m) << (q + 9)
		e4m3Mag2[b] = e4m3Mag[b] * e4m3Mag[b]
		if m != 0 {
			e4m3Ceil[b] = int8(q + ceilLog2Div6(m))
		}
	}
	engramShifts = simd.NewShifts(e4m3Ceil)
	for i := range engramCode {
		d := i + engramMinShift
		for b := range 256 {
			if b&e4m3NaN == e4m3NaN {
				continue // NaN blocks never reach the table
			}
			m, q := e4m3Int(byte(b))
			c := e2m1Magnitude(int64(m), q+d)
			if b&0x80 != 0 && m != 0 {
				c |= 8 // x < 0: tiny negatives keep their sign as -0
			}
			engramCode[i][b] = c
		}
	}
	for i := range engramSteps {
		engramSteps[i] = simd.NewSteps(codeSteps(&engramCode[i]))
		for b := range 256 {
			if b&e4m3NaN != e4m3NaN && engramSteps[i].Code(byte(b)) != engramCode[i][b] {
				panic("codecs: engramCode is not a step function of the magnitude")
			}
		}
	}
	for p := range e2m1PairSq {
		lo, hi := e2m1Signed[p&15], e2m1Signed[p>>4]
		e2m1PairSq[p] = lo*lo + hi*hi
	}
}

// codeSteps returns the thresholds of a code table over E4M3 bytes: the
// code magnitude of a byte b is the number of k with b&0x7F > above[k].
// above[k] is one less than the smallest magnitude byte whose code reaches
// k+1, or 0x7F (never exceeded) where none does.
func codeSteps(code *[256]byte) (above [7]byte) {
	for k := range above {
		above[k] = 0x7f
		for m := range e4m3NaN {
			if code[m] > byte(k) {
				above[k] = byte(m - 1)
				break
			}
		}
	}
	return above
}

// ceilLog2Div6 returns the smallest u with 6 x 2^u >= m, for m in [1, 15].
func ceilLog2Div6(m uint32) int {
	u := -2
	for 6<<(u+2) < m<<2 {
		u++
	}
	return u
}

// e2m1Magnitude returns the E2M1 magnitude code (0..7) nearest to
// min(m x 2^d, 6), ties to the even code, by exact integer comparison of
// 4 x m x 2^d with 4 x the midpoints.
func e2m1Magnitude(m int64, d int) byte {
	sh := d + 2
	for i, mid := range e2m1Mid4 {
		x := m
		if sh >= 0 {
			x <<= sh
		} else {
			mid <<= -sh
		}
		switch {
		case x < mid:
			return byte(i)
		case x == mid:
			return byte(i + i&1) // a tie: the even one of codes i and i+1
		}
	}
	return 7
}

// EngramFP4 transcodes a run of Engram 32-blocks from FP8 to FP4 as
// FORMATS.md "engram-fp4/" rules: srcW holds 32 F8_E4M3 bytes per block and
// srcS one E8M0 byte per block; dstW receives 16 bytes of packed E2M1 codes
// per block (element 2i in the low nibble) and dstS the new E8M0 scale. With
// v = E4M3(w) x 2^(s-127) and amax the block's largest |v|, the new scale is
// 2^e, e = max(-126, ceil(log2(amax/6))) capped at 127, and each code is the
// E2M1 value nearest to v/2^e (magnitude at most 6, ties to the even code,
// sign bit iff v < 0). A block holding a NaN element or scale gets scale 255
// and codes 0; a block of zeros gets scale byte 1 (e = -126) and codes 0.
//
// Row geometry: a table row of 256 elements is 256+8 bytes in and 128+8 out;
// a run of whole rows is a run of blocks, so any rows i..j can be transcoded
// alone.
func EngramFP4(dstW, dstS, srcW, srcS []byte) EngramCounts {
	n := len(srcS)
	checkLen("EngramFP4 srcW", len(srcW), MXBlock*n)
	checkLen("EngramFP4 dstW", len(dstW), MXBlock/2*n)
	checkLen("EngramFP4 dstS", len(dstS), n)
	if engramVector {
		return engramFP4Vector(dstW, dstS, srcW, srcS)
	}
	c := EngramCounts{Blocks: int64(n)}
	for i, s := range srcS {
		src := (*[MXBlock]byte)(srcW[MXBlock*i:])
		dst := (*[MXBlock / 2]byte)(dstW[MXBlock/2*i:])
		t, e, ok := engramScale(simd.MaxLow7(src), s)
		dstS[i] = t
		if !ok {
			*dst = [MXBlock / 2]byte{}
			if t == E8M0NaN {
				c.NaNBlocks++
			}
			continue
		}
		simd.PackNibbles(dst, src, &engramCode[int(s)-127-e-engramMinShift])
	}
	return c
}

// engramChunk is how many blocks the vector path of EngramFP4 takes at a
// time: its block maxima and table selectors stay on the stack.
const engramChunk = 512

// engramFP4Vector is EngramFP4 on the vector kernels: the block maxima of a
// chunk at once, then their scales and code tables, then the codes, each
// block under the Steps of its shift. A zero block's bytes code to 0 under
// any Steps; a NaN block's are cleared afterwards.
func engramFP4Vector(dstW, dstS, srcW, srcS []byte) EngramCounts {
	c := EngramCounts{Blocks: int64(len(srcS))}
	var top, sel [engramChunk]byte
	for len(srcS) > 0 {
		k := min(len(srcS), engramChunk)
		w, ds := srcW[:MXBlock*k], dstS[:k]
		simd.MaxLow7s(top[:k], w)
		simd.RescaleE8M0(ds, sel[:k], top[:k], srcS[:k], &engramShifts, -engramMinShift)
		dw := dstW[:MXBlock/2*k]
		simd.PackSteps(dw, w, engramSteps[:], sel[:k])
		if bytes.IndexByte(ds, E8M0NaN) >= 0 {
			for i, t := range ds {
				if t == E8M0NaN {
					c.NaNBlocks++
					clear(dw[MXBlock/2*i : MXBlock/2*(i+1)])
				}
			}
		}
		srcW, srcS, dstW, dstS = srcW[MXBlock*k:], srcS[k:], dstW[MXBlock/2*k:], dstS[k:]
	}
	return c
}

// EngramScales writes only the new scale bytes of EngramFP4 (same
// arguments less dstW): a view serving the scale tensor need not pack the
// codes it would throw away.
func EngramScales(dstS, srcW, srcS []byte) EngramCounts {
	n := len(srcS)
	checkLen("EngramScales srcW", len(srcW), MXBlock*n)
	checkLen("EngramScales dstS", len(dstS), n)
	c := EngramCounts{Blocks: int64(n)}
	var top, sel [engramChunk]byte
	for i := 0; i < n; i += engramChunk {
		k := min(n-i, engramChunk)
		if engramVector {
			simd.MaxLow7s(top[:k], srcW[MXBlock*i:MXBlock*(i+k)])
		} else {
			for j := range k {
				top[j] = simd.MaxLow7((*[MXBlock]byte)(srcW[MXBlock*(i+j):]))
			}
		}
		ds := dstS[i : i+k]
		simd.RescaleE8M0(ds, sel[:k], top[:k], srcS[i:i+k], &engramShifts, -engramMinShift)
		c.NaNBlocks += int64(bytes.Count(ds, []byte{E8M0NaN}))
	}
	return c
}

// engramScale returns the new scale byte t = e+127 of a block whose largest
// E4M3 magnitude byte is top (E4M3 magnitudes order like their bytes, and
// NaN is the largest) and whose source scale byte is s; ok is false for a
// block whose codes are all 0: NaN (t = 255) or zeros of either sign
// (amax = 0, e = -126).
func engramScale(top, s byte) (t byte, e int, ok bool) {
	switch {
	case top == e4m3NaN || s == E8M0NaN:
		return E8M0NaN, 0, false
	case top == 0:
		return 1, -126, false
	}
	e = min(max(int(e4m3Ceil[top])+int(s)-127, -126), 127)
	return byte(e + 127), e, true
}

// EngramCosine writes, for each row of an Engram table, the cosine
// similarity between the source values v = E4M3(w) x 2^(s-127) and the
// decoded FP4 values E2M1(code) x 2^(t-127) (srcW, srcS in and dstW, dstS
// out of EngramFP4, with len(cos) rows). Within a block the sums are exact
// integers; blocks add in row order in float64. cos[r] is NaN where the
// cosine is undefined: a row holding a NaN block, or one whose source or
// decoded values are all zero. A report's mean skips those rows, as the seed
// does.
func EngramCosine(cos []float64, srcW, srcS, dstW, dstS []byte) {
	n := len(srcS)
	checkLen("EngramCosine srcW", len(srcW), MXBlock*n)
	checkLen("EngramCosine dstW", len(dstW), MXBlock/2*n)
	checkLen("EngramCosine dstS", len(dstS), n)
	if len(cos) == 0 {
		checkLen("EngramCosine srcS", n, 0)
		return
	}
	per := n / len(cos)
	checkLen("EngramCosine srcS", n, per*len(cos))
	for r := range cos {
		var dot, nv, nr float64
		nan := false
		for i := r * per; i < (r+1)*per; i++ {
			s, t := srcS[i], dstS[i]
			src := (*[MXBlock]byte)(srcW[MXBlock*i:])
			dst := (*[MXBlock / 2]byte)(dstW[MXBlock/2*i:])
			if s == E8M0NaN || t == E8M0NaN || simd.MaxLow7(src) == e4m3NaN {
				nan = true
				break
			}
			var d, a2, c2 int64
			for j, p := range dst {
				w0, w1 := src[2*j], src[2*j+1]
				// The code's sign relative to the source's picks the sign of c.
				d += e4m3Mag[w0&0x7f]*e2m1Signed[p&15^w0>>7<<3] + e4m3Mag[w1&0x7f]*e2m1Signed[p>>4^w1>>7<<3]
				a2 += e4m3Mag2[w0&0x7f] + e4m3Mag2[w1&0x7f]
				c2 += e2m1PairSq[p]
			}
			// v = ±a x 2^(s-127-9) and r = ±c x 2^(t-127-1).
			dot += float64(d) * pow2(int(s)+int(t)-264)
			nv += float64(a2) * pow2(2*(int(s)-136))
			nr += float64(c2) * pow2(2*(int(t)-128))
		}
		if nan || nv == 0 || nr == 0 {
			cos[r] = math.NaN()
			continue
		}
		cos[r] = dot / (math.Sqrt(nv) * math.Sqrt(nr))
	}
}

// pow2 returns 2^e for e in the normal float64 range, which every exponent
// of EngramCosine is in ([-272, 244]).
func pow2(e int) float64 { return math.Float64frombits(uint64(e+1023) << 52) }

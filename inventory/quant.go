package inventory

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/simd"
)

// quantFormat is what the checks of a quantised weight need to know about
// its codes.
type quantFormat struct {
	fp4 bool
	// maxCode and minCode are the largest and the smallest nonzero code
	// magnitude.
	maxCode, minCode float64
	// sigBits is how many significant bits a code has at most: a decoded
	// value's lowest set bit lies at most sigBits-1 below its leading bit.
	sigBits int
}

var (
	fp4Format = quantFormat{fp4: true, maxCode: 6, minCode: 0.5, sigBits: 2}
	fp8Format = quantFormat{maxCode: 448, minCode: 0x1p-9, sigBits: 4}
)

// Limits of the float types whose exactness the checks report.
const (
	maxF16  = 65504
	minF16  = 0x1p-24  // the smallest float16 subnormal: every float16 is a multiple of it
	minBF16 = 0x1p-133 // the same for bfloat16
	minF32  = 0x1p-149
)

// quantScan accumulates the checks of one quantised weight, read block by
// block with each block's scale, at a cost close to one counter increment
// per two bytes:
//
//   - Code counts come from vector kernels over all blocks: the FP4 code
//     histogram, and for FP8 the NaN, zero and negative-zero codes and the
//     largest code magnitude, which need no histogram.
//   - The range and exactness of the decoded values need a block only when
//     its scale could change them: a block whose largest possible value is
//     below the largest seen, whose smallest possible nonzero value is above
//     the smallest seen, and whose scale keeps every value exact in float16
//     and bfloat16 is skipped on one table lookup. A block that could only
//     raise the largest value has its codes compared with the largest code
//     that would not, eight at a time in a word (FP8 blocks of whole
//     vectors: by simd.ExceedsE4M3). The rest are looked at byte by byte;
//     with real scale distributions they are few.
//   - Blocks whose scale is NaN, not positive, or so large or small that
//     the float32 decode overflows or underflows are decoded value by value
//     and counted apart.
type quantScan struct {
	f   quantFormat
	fp4 simd.NibbleHist
	fp8 simd.E4M3Tally

	special           valueAcc // the values of special blocks
	specZero, specNaN int64    // zero and NaN codes in special blocks
	ext               valueAcc // range and exactness of the other blocks (no counts)
	seen              extState // ext when mode was computed
	refreshes         int      // mode computations for this weight

	e8m0 [256]float32 // E8M0 scale byte -> scale
	// mode says, per E8M0 scale byte, what a block of that scale needs;
	// for maxOnly, above[b] added to every lane of code magnitudes sets a
	// lane's top bit when its code times the scale exceeds ext.absMax.
	mode  [256]blockMode
	above [256]uint64
	// thr is mode for simd.ExceedsE4M3: the largest FP8 code magnitude
	// that a block of the scale may hold and be skipped, -1 for fullBlock.
	thr [256]int8
}

// blockMode is what a block of a given scale needs.
type blockMode uint8

const (
	skipBlock blockMode = iota // nothing: its values cannot change ext
	maxOnly                    // a look at its largest code, a word at a time
	fullBlock                  // block: its scale is special, or near a bound
)

func newQuantScan() *quantScan {
	q := new(quantScan)
	for b := range 256 {
		q.e8m0[b] = codecs.E8M0ToFloat32(byte(b))
	}
	return q
}

// eagerRefreshes is how many times a weight's modes are recomputed as
// soon as ext changes; after that, once a run of blocks.
const eagerRefreshes = 64

// reset starts a weight of format f.
func (q *quantScan) reset(f quantFormat) {
	q.f = f
	q.fp4, q.fp8 = simd.NibbleHist{}, simd.E4M3Tally{}
	q.special, q.ext = valueAcc{}, valueAcc{}
	q.specZero, q.specNaN = 0, 0
	q.refreshes = 0
	q.refresh(true)
}

// count adds the codes of p to the code counts.
func (q *quantScan) count(p []byte) {
	if q.f.fp4 {
		q.fp4.Add(p)
	} else {
		q.fp8.Add(p)
	}
}

// blocksE8M0 checks the blocks of w (block i is w[i*bl:(i+1)*bl], the last
// may be shorter) whose E8M0 scale bytes are scales.
func (q *quantScan) blocksE8M0(w, scales []byte, bl int) {
	lanes, tops := uint64(0x7f7f7f7f7f7f7f7f), uint64(0x8080808080808080)
	if q.f.fp4 {
		lanes, tops = 0x7777777777777777, 0x8888888888888888
	}
	if !q.f.fp4 && bl%32 == 0 {
		// FP8 blocks of whole vectors: a vector kernel finds those that
		// need a look, 64 at a time, on modes at most 64 blocks stale,
		// which only look at more blocks than they need.
		whole := min(len(scales), len(w)/bl)
		for i := 0; i < whole; i += 64 {
			n := min(64, whole-i)
			for m := simd.ExceedsE4M3(w[i*bl:(i+n)*bl], bl, scales[i:i+n], &q.thr); m != 0; m &= m - 1 {
				j := i + bits.TrailingZeros64(m)
				q.block(w[j*bl:j*bl+bl], q.e8m0[scales[j]])
				if q.refreshes < eagerRefreshes {
					q.refresh(false)
				}
			}
		}
		w, scales = w[whole*bl:], scales[whole:]
	}
	for i := 0; i < len(scales); i++ {
		// Most blocks are skipped: look at eight scales at once.
		if i+8 <= len(scales) {
			sc := scales[i : i+8 : i+8]
			if q.mode[sc[0]]|q.mode[sc[1]]|q.mode[sc[2]]|q.mode[sc[3]]|
				q.mode[sc[4]]|q.mode[sc[5]]|q.mode[sc[6]]|q.mode[sc[7]] == skipBlock {
				i += 7
				continue
			}
		}
		s := scales[i]
		m := q.mode[s]
		if m == skipBlock {
			continue
		}
		blk := w[i*bl : min(i*bl+bl, len(w))]
		if m == maxOnly {
			add, hit := q.above[s], uint64(0)
			j := 0
			for ; j+8 <= len(blk); j += 8 {
				hit |= binary.LittleEndian.Uint64(blk[j:])&lanes + add
			}
			for ; j < len(blk); j++ {
				hit |= uint64(blk[j])&lanes + add
			}
			if hit&tops == 0 {
				continue
			}
		}
		q.block(blk, q.e8m0[s])
		// Modes computed before ext grew only look at more blocks than
		// they need: they follow ext at once while it settles, then once
		// a run, so that values growing block after block cannot make
		// every block pay for recomputing them.
		if q.refreshes < eagerRefreshes {
			q.refresh(false)
		}
	}
	q.refresh(false)
}

// blocksF32 checks the blocks of w whose float32 scales are in scales
// (little-endian).
func (q *quantScan) blocksF32(w, scales []byte, bl int) {
	for i := 0; 4*i < len(scales); i++ {
		s := math.Float32frombits(binary.LittleEndian.Uint32(scales[4*i:]))
		if q.modeOf(float64(s)) != skipBlock {
			q.block(w[i*bl:min(i*bl+bl, len(w))], s)
		}
	}
}

// isSpecial reports whether a block of scale s must be decoded value by
// value: its decode is NaN, has the wrong sign, or overflows or underflows
// float32.
func (q *quantScan) isSpecial(s float64) bool {
	return !(s > 0) || s*q.f.maxCode > math.MaxFloat32 || s*q.f.minCode < minF32
}

// modeOf says what a block of scale s needs.
func (q *quantScan) modeOf(s float64) blockMode {
	e := &q.ext
	switch {
	case q.isSpecial(s) || !e.finite || !e.nonzero || s*q.f.minCode < e.minNonzero ||
		!q.safe(s, s*q.f.maxCode, s*q.f.minCode):
		return fullBlock
	case s*q.f.maxCode <= e.absMax:
		return skipBlock
	}
	return maxOnly
}

// safe reports whether every value of a block with scale s whose nonzero
// values lie in [lo, hi] is exact in float16 and bfloat16, as far as ext
// still holds them all exact. A power-of-two scale keeps the codes'
// significant bits, so a value is exact when it is in range and its lowest
// possible bit, sigBits-1 below its leading bit, is on the type's grid.
func (q *quantScan) safe(s, hi, lo float64) bool {
	if q.ext.inexact16 && q.ext.inexactBF {
		return true
	}
	if f := math.Float32bits(float32(s)); f&(1<<23-1) != 0 || float64(float32(s)) != s {
		return false // not a power of two: the products round
	}
	grid := math.Ldexp(1, q.f.sigBits-1)
	ok16 := q.ext.inexact16 || (hi <= maxF16 && (lo == 0 || lo >= minF16*grid))
	okBF := q.ext.inexactBF || lo == 0 || lo >= minBF16*grid
	return ok16 && okBF
}

// extState is what decides whether a block matters to ext.
type extState struct {
	absMax, minNonzero                    float64
	finite, nonzero, inexact16, inexactBF bool
}

// refresh recomputes the mode of every E8M0 scale when ext has changed
// since the last time (or always, with force).
func (q *quantScan) refresh(force bool) {
	e := &q.ext
	now := extState{e.absMax, e.minNonzero, e.finite, e.nonzero, e.inexact16, e.inexactBF}
	if !force && now == q.seen {
		return
	}
	q.seen = now
	q.refreshes++
	top, unit := uint64(0x7f), uint64(0x0101010101010101)
	if q.f.fp4 {
		top, unit = 7, 0x1111111111111111
	}
	for b := range 256 {
		s := float64(q.e8m0[b])
		switch q.mode[b] = q.modeOf(s); q.mode[b] {
		case skipBlock:
			q.thr[b] = 127
		case fullBlock:
			q.thr[b] = -1
		case maxOnly:
			lo := q.largestWithin(s)
			q.above[b], q.thr[b] = (top-lo)*unit, int8(lo)
		}
	}
}

// largestWithin returns the largest code magnitude (FP8: 7 bits; FP4: 3
// bits) below the top one whose value times s does not exceed ext.absMax.
func (q *quantScan) largestWithin(s float64) uint64 {
	top, decode := uint64(0x7f), codecs.E4M3ToFloat32
	if q.f.fp4 {
		top, decode = 7, codecs.E2M1ToFloat32
	}
	// The largest magnitude whose value does not exceed absMax, found by
	// bisection: codes grow with their magnitude bits in both formats.
	lo, hi := uint64(0), top-1 // decode(lo)*s <= absMax < decode(hi+1)*s
	for lo < hi {
		m := (lo + hi + 1) / 2
		if float64(decode(byte(m)))*s <= q.ext.absMax {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// block checks one block of scale s.
func (q *quantScan) block(blk []byte, s float32) {
	if q.isSpecial(float64(s)) {
		q.exact(blk, s)
		return
	}
	hi, lo, nan := q.extremes(blk)
	if hi == 0 && !nan && q.ext.finite {
		return // all zero: nothing new
	}
	vhi, vlo := float64(hi*s), float64(lo*s)
	if nan || !q.safe(float64(s), vhi, vlo) {
		q.distinct(blk, s)
	} else {
		q.ext.add(vhi, 0)
		if lo > 0 {
			q.ext.add(vlo, 0)
		}
	}
}

// extremes returns the largest and the smallest nonzero code magnitude of
// a block (0 when all are zero), and whether it holds an FP8 NaN code.
func (q *quantScan) extremes(blk []byte) (hi, lo float32, nan bool) {
	// Most blocks that get here in bulk are all zero: see that a word at
	// a time.
	mask := uint64(0x7f7f7f7f7f7f7f7f)
	if q.f.fp4 {
		mask = 0x7777777777777777
	}
	var or uint64
	i := 0
	for ; i+8 <= len(blk); i += 8 {
		or |= binary.LittleEndian.Uint64(blk[i:])
	}
	for ; i < len(blk); i++ {
		or |= uint64(blk[i])
	}
	if or&mask == 0 {
		return 0, 0, false
	}
	var maxM, minM byte = 0, 255
	if q.f.fp4 {
		for _, b := range blk {
			for _, m := range [2]byte{b & 7, b >> 4 & 7} {
				maxM = max(maxM, m)
				if m != 0 {
					minM = min(minM, m)
				}
			}
		}
		hi = codecs.E2M1ToFloat32(maxM)
		if minM != 255 {
			lo = codecs.E2M1ToFloat32(minM)
		}
		return hi, lo, false
	}
	for _, b := range blk {
		m := b & 0x7f
		if m == 0x7f {
			nan = true
			continue
		}
		maxM = max(maxM, m)
		if m != 0 {
			minM = min(minM, m)
		}
	}
	hi = codecs.E4M3ToFloat32(maxM)
	if minM != 255 {
		lo = codecs.E4M3ToFloat32(minM)
	}
	return hi, lo, nan
}

// distinct adds every distinct value of a block to ext.
func (q *quantScan) distinct(blk []byte, s float32) {
	var present [4]uint64
	for _, b := range blk {
		present[b>>6] |= 1 << (b & 63)
	}
	var codes uint16 // FP4 codes present
	for w, word := range present {
		for word != 0 {
			b := byte(w*64 + bits.TrailingZeros64(word))
			word &= word - 1
			if q.f.fp4 {
				codes |= 1<<(b&15) | 1<<(b>>4)
			} else {
				q.ext.add(float64(codecs.E4M3ToFloat32(b)*s), 0)
			}
		}
	}
	for codes != 0 {
		c := byte(bits.TrailingZeros16(codes))
		codes &= codes - 1
		q.ext.add(float64(codecs.E2M1ToFloat32(c)*s), 0)
	}
}

// exact decodes a special block value by value, as codecs decodes it: one
// float32 product of code and scale.
func (q *quantScan) exact(blk []byte, s float32) {
	for _, b := range blk {
		if q.f.fp4 {
			for _, c := range [2]byte{b & 15, b >> 4} {
				q.special.add(float64(codecs.E2M1ToFloat32(c)*s), 1)
				if c&7 == 0 {
					q.specZero++
				}
			}
			continue
		}
		q.special.add(float64(codecs.E4M3ToFloat32(b)*s), 1)
		switch b & 0x7f {
		case 0:
			q.specZero++
		case 0x7f:
			q.specNaN++
		}
	}
}

// checks reports the checks of weight t.
func (q *quantScan) checks(t *checkpoint.Tensor) *PairChecks {
	c := &PairChecks{ShapeOK: true}
	var n, zeroCodes, nanCodes int64
	last := t.Shape[len(t.Shape)-1]
	if q.f.fp4 {
		hist := make([]int64, 16)
		for code, k := range q.fp4 {
			hist[code] = k
			n += k
		}
		c.CodeHist, c.NegZeroCodes = hist, hist[8]
		zeroCodes = hist[0] + hist[8]
		c.PadCols = pad(2*last, codecs.MXBlock)
		if len(t.Shape) >= 2 {
			c.PadRows = pad(t.Shape[len(t.Shape)-2], codecs.MXBlock)
		}
	} else {
		n = q.fp8.N
		nanCodes = q.fp8.NaN
		zeroCodes = q.fp8.Zero + q.fp8.NegZero
		absMax := float64(codecs.E4M3ToFloat32(q.fp8.MaxMag))
		c.NaNCodes, c.NegZeroCodes, c.CodeAbsMax = ptr(nanCodes), q.fp8.NegZero, ptr(absMax)
		c.PadRows, c.PadCols = pad(t.Shape[0], t.Block[0]), pad(last, t.Block[1])
	}
	// The special blocks' values are counted; the others' counts follow
	// from their codes, their range and exactness from ext.
	d := q.special
	d.n = n
	d.zeros += zeroCodes - q.specZero
	d.nonfinite += nanCodes - q.specNaN
	d.merge(&q.ext)
	if nanCodes > 0 {
		// NaN is exact in no type. The tally counts every NaN code; those
		// of blocks the scan skipped for their range were never added.
		d.inexact16, d.inexactBF = true, true
	}
	c.Decoded = d.decoded()
	return c
}

// pad is how many elements fill n up to a multiple of block.
func pad(n, block int64) int64 {
	if block <= 0 {
		return 0
	}
	return (block - n%block) % block
}

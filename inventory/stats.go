package inventory

import (
	"encoding/binary"
	"math"

	"github.com/dsfs/dsfs/codecs"
)

// valueAcc accumulates statistics of a multiset of values, each added with
// a count, so that a histogram of encodings can be folded in one distinct
// value at a time.
type valueAcc struct {
	n, nonfinite, zeros  int64
	min, max, absMax     float64
	minNonzero           float64
	finite, nonzero      bool // a finite value, a nonzero finite value was seen
	inexact16, inexactBF bool // a value does not survive float16, bfloat16
}

// add counts value v n times.
func (a *valueAcc) add(v float64, n int64) {
	a.n += n
	// A value is exact in a type when the round trip through it gives it
	// back: NaN never does, infinities do.
	if f := float32(v); float64(f) != v {
		a.inexact16, a.inexactBF = true, true
	} else {
		a.inexact16 = a.inexact16 || codecs.F16ToFloat32(codecs.Float32ToF16(f)) != f
		a.inexactBF = a.inexactBF || codecs.BF16ToFloat32(codecs.Float32ToBF16(f)) != f
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		a.nonfinite += n
		return
	}
	if !a.finite {
		a.min, a.max, a.finite = v, v, true
	}
	a.min, a.max = min(a.min, v), max(a.max, v)
	abs := math.Abs(v)
	a.absMax = max(a.absMax, abs)
	if v == 0 {
		a.zeros += n
		return
	}
	if !a.nonzero || abs < a.minNonzero {
		a.minNonzero, a.nonzero = abs, true
	}
}

// addF32 counts the little-endian float32 values in b.
func (a *valueAcc) addF32(b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		a.add(float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))), 1)
	}
}

// addF64 counts the little-endian float64 values in b.
func (a *valueAcc) addF64(b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		a.add(math.Float64frombits(binary.LittleEndian.Uint64(b[i:])), 1)
	}
}

func ptr[T any](v T) *T { return &v }

// floatStats reports the values as a float tensor's checks.
func (a *valueAcc) floatStats() *FloatStats {
	s := &FloatStats{
		N: a.n, NonFinite: a.nonfinite, Zeros: a.zeros,
		ExactFP16: !a.inexact16 && a.nonfinite == 0,
		ExactBF16: !a.inexactBF && a.nonfinite == 0,
	}
	if a.finite {
		s.Min, s.Max, s.AbsMax = ptr(a.min), ptr(a.max), ptr(a.absMax)
	}
	if a.nonzero {
		s.MinNonzeroAbs = ptr(a.minNonzero)
	}
	return s
}

// decoded reports the values as the decode of a quantised weight.
func (a *valueAcc) decoded() *Decoded {
	d := &Decoded{Zeros: a.zeros, NonFinite: a.nonfinite, ExactFP16: !a.inexact16, ExactBF16: !a.inexactBF}
	if a.finite {
		d.AbsMax = ptr(a.absMax)
	}
	if a.nonzero {
		d.MinNonzeroAbs = ptr(a.minNonzero)
	}
	return d
}

// halfHist counts 16-bit encodings (BF16, F16): a tensor of millions of
// values holds a few thousand distinct ones, so counting them costs one
// increment per value and the statistics are computed once per encoding.
type halfHist [1 << 16]uint64

func (h *halfHist) add(b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		h[uint16(x)]++
		h[uint16(x>>16)]++
		h[uint16(x>>32)]++
		h[uint16(x>>48)]++
	}
	for i := len(b) &^ 7; i+2 <= len(b); i += 2 {
		h[binary.LittleEndian.Uint16(b[i:])]++
	}
}

// fold adds the counted values, decoded by decode, to a and clears h.
func (h *halfHist) fold(a *valueAcc, decode func(uint16) float32) {
	for v, n := range h {
		if n != 0 {
			a.add(float64(decode(uint16(v))), int64(n))
			h[v] = 0
		}
	}
}

// byteHist counts bytes in four interleaved tables, so that runs of one
// byte value do not serialise on a single counter.
type byteHist [4][256]uint64

func (h *byteHist) add(b []byte) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		h[0][byte(x)]++
		h[1][byte(x>>8)]++
		h[2][byte(x>>16)]++
		h[3][byte(x>>24)]++
		h[0][byte(x>>32)]++
		h[1][byte(x>>40)]++
		h[2][byte(x>>48)]++
		h[3][byte(x>>56)]++
	}
	for ; i < len(b); i++ {
		h[0][b[i]]++
	}
}

// scaleStats reports counted E8M0 bytes and clears h.
func (h *byteHist) scaleStats() *ScaleStats {
	s := &ScaleStats{ExpHist: ExpHist{}}
	for b := range 256 {
		n := int64(h[0][b] + h[1][b] + h[2][b] + h[3][b])
		h[0][b], h[1][b], h[2][b], h[3][b] = 0, 0, 0, 0
		if n == 0 {
			continue
		}
		s.N += n
		e, ok := codecs.E8M0Exponent(byte(b))
		if !ok {
			s.NaN += n
			continue
		}
		if s.ExpMin == nil {
			s.ExpMin = ptr(e)
		}
		s.ExpMax = ptr(e)
		s.ExpHist = append(s.ExpHist, ExpCount{e, n})
	}
	return s
}

// merge adds the values b counted to a.
func (a *valueAcc) merge(b *valueAcc) {
	a.n += b.n
	a.nonfinite += b.nonfinite
	a.zeros += b.zeros
	a.inexact16 = a.inexact16 || b.inexact16
	a.inexactBF = a.inexactBF || b.inexactBF
	if b.finite {
		if !a.finite {
			a.min, a.max, a.finite = b.min, b.max, true
		}
		a.min, a.max, a.absMax = min(a.min, b.min), max(a.max, b.max), max(a.absMax, b.absMax)
	}
	if b.nonzero && (!a.nonzero || b.minNonzero < a.minNonzero) {
		a.minNonzero, a.nonzero = b.minNonzero, true
	}
}

package simd

// E4M3Tally is what the checks of an FP8 weight need from its E4M3 codes
// alone: the counts of the zero and NaN codes and the largest magnitude,
// without a histogram. Add it up buffer by buffer.
type E4M3Tally struct {
	N       int64 // codes counted
	Zero    int64 // code 0x00
	NegZero int64 // code 0x80
	NaN     int64 // codes 0x7F and 0xFF
	// MaxMag is the largest magnitude code&0x7F of the codes that are not
	// NaN, 0 when there are none.
	MaxMag byte
}

// Add counts the codes of p.
func (t *E4M3Tally) Add(p []byte) {
	t.N += int64(len(p))
	p = t.addVector(p)
	t.addGeneric(p)
}

// NibbleHist counts 4-bit codes (FP4) packed two to a byte: h[c] is how
// many nibbles, low or high, equal c.
type NibbleHist [16]int64

// Add counts the nibbles of p.
func (h *NibbleHist) Add(p []byte) {
	p = h.addVector(p)
	h.addGeneric(p)
}

// ExceedsE4M3 reports, in bit i of its result, whether block i of p holds
// an E4M3 code whose magnitude b&0x7F exceeds thr[scales[i]]: a threshold
// of -1 flags every block of its scale, one of 127 none. The blocks are
// bl bytes, bl a multiple of 32; p holds len(scales) <= 64 of them.
func ExceedsE4M3(p []byte, bl int, scales []byte, thr *[256]int8) uint64 {
	if len(scales) > 64 || bl <= 0 || bl%32 != 0 || len(p) < len(scales)*bl {
		panic("simd: ExceedsE4M3 of mismatched blocks")
	}
	if m, ok := exceedsVector(p, bl, scales, thr); ok {
		return m
	}
	return exceedsGeneric(p, bl, scales, thr)
}

// E8M0Tally is what an NVFP4 group's global exponent needs from its E8M0
// scale bytes in almost every checkpoint, without a histogram: how many
// are 0 (2^-127, which all-zero blocks often carry) and 255 (NaN), and the
// smallest and the largest of the others. Add it up buffer by buffer.
type E8M0Tally struct {
	N    int64 // bytes counted
	Zero int64 // byte 0
	NaN  int64 // byte 255
	// Lo and Hi are the smallest and the largest byte in [1, 254]; both
	// are 0 when there is none.
	Lo, Hi byte
}

// Add counts the bytes of p.
func (t *E8M0Tally) Add(p []byte) {
	t.N += int64(len(p))
	p = t.addVector(p)
	t.addGeneric(p)
}

// span takes bytes from lo to hi, both in [1, 254], into Lo and Hi; hi 0
// says there were none.
func (t *E8M0Tally) span(lo, hi byte) {
	switch {
	case hi == 0:
	case t.Hi == 0:
		t.Lo, t.Hi = lo, hi
	default:
		t.Lo, t.Hi = min(t.Lo, lo), max(t.Hi, hi)
	}
}

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

// addGeneric counts the codes of p one by one.
func (t *E4M3Tally) addGeneric(p []byte) {
	for _, b := range p {
		switch m := b & 0x7f; {
		case m == 0x7f:
			t.NaN++
		case b == 0:
			t.Zero++
		case b == 0x80:
			t.NegZero++
		default:
			t.MaxMag = max(t.MaxMag, m)
		}
	}
}

// NibbleHist counts 4-bit codes (FP4) packed two to a byte: h[c] is how
// many nibbles, low or high, equal c.
type NibbleHist [16]int64

// Add counts the nibbles of p.
func (h *NibbleHist) Add(p []byte) {
	p = h.addVector(p)
	h.addGeneric(p)
}

// addGeneric counts the nibbles of p through a byte histogram in four
// interleaved tables, so that runs of one byte do not serialise on one
// counter, folded into nibble counts at the end.
func (h *NibbleHist) addGeneric(p []byte) {
	if len(p) < 256 {
		// Fewer bytes than the tables have entries to fold.
		for _, b := range p {
			h[b&15]++
			h[b>>4]++
		}
		return
	}
	var bytes [4][256]uint64
	i := 0
	for ; i+4 <= len(p); i += 4 {
		bytes[0][p[i]]++
		bytes[1][p[i+1]]++
		bytes[2][p[i+2]]++
		bytes[3][p[i+3]]++
	}
	for ; i < len(p); i++ {
		bytes[0][p[i]]++
	}
	for b := range 256 {
		n := int64(bytes[0][b] + bytes[1][b] + bytes[2][b] + bytes[3][b])
		h[b&15] += n
		h[b>>4] += n
	}
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

func exceedsGeneric(p []byte, bl int, scales []byte, thr *[256]int8) uint64 {
	var m uint64
	for i, s := range scales {
		t := thr[s]
		if t == 127 {
			continue
		}
		for _, b := range p[i*bl : i*bl+bl] {
			if int8(b&0x7f) > t {
				m |= 1 << i
				break
			}
		}
	}
	return m
}

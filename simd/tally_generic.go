// Portable counting loops: the reference every architecture's kernel must
// match (see "Kernels per architecture" in simd.go), and what runs where
// there is none.

package simd

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

// addGeneric counts the bytes of p one by one.
func (t *E8M0Tally) addGeneric(p []byte) {
	for _, b := range p {
		switch b {
		case 0:
			t.Zero++
		case 255:
			t.NaN++
		default:
			t.span(b, b)
		}
	}
}

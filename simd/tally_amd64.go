package simd

import "golang.org/x/sys/cpu"

// useAVX2 and useAVX512 select the AVX2 and the AVX-512BW counting
// kernels.
var (
	useAVX2   = cpu.X86.HasAVX2
	useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW
)

// tallyE4M3 counts the codes of n32 blocks of 32 bytes from p into out:
// zero, negative zero and NaN codes, and the largest non-NaN magnitude.
//
//go:noescape
func tallyE4M3(p *byte, n32 int, out *[4]uint64)

// addVector counts the whole 32-byte blocks of p and returns the rest.
func (t *E4M3Tally) addVector(p []byte) []byte {
	n32 := len(p) / 32
	if !useAVX2 || n32 == 0 {
		return p
	}
	var out [4]uint64
	tallyE4M3(&p[0], n32, &out)
	t.Zero += int64(out[0])
	t.NegZero += int64(out[1])
	t.NaN += int64(out[2])
	t.MaxMag = max(t.MaxMag, byte(out[3]))
	return p[n32*32:]
}

// countNibbles8 adds to out[k] (in four lanes) the count of nibbles equal
// to base+k in n32 blocks of 32 bytes from p.
//
//go:noescape
func countNibbles8(p *byte, n32 int, base int, out *[8][4]uint64)

// countNibbles16 adds to out[c] (in eight lanes) the count of nibbles
// equal to c < 15 in n64 blocks of 64 bytes from p.
//
//go:noescape
func countNibbles16(p *byte, n64 int, out *[16][8]uint64)

// addVector counts the nibbles of the whole 64-byte blocks of p with
// AVX-512, or of its 32-byte blocks with AVX2, and returns the rest.
func (h *NibbleHist) addVector(p []byte) []byte {
	if n64 := len(p) / 64; useAVX512 && n64 > 0 {
		var out [16][8]uint64
		countNibbles16(&p[0], n64, &out)
		rest := int64(128 * n64) // nibbles
		for c, lanes := range out[:15] {
			var n uint64
			for _, k := range lanes {
				n += k
			}
			h[c] += int64(n)
			rest -= int64(n)
		}
		h[15] += rest
		p = p[n64*64:]
	}
	n32 := len(p) / 32
	if !useAVX2 || n32 == 0 {
		return p
	}
	// Two passes of eight codes each, over data still in cache: sixteen
	// counters do not fit the sixteen vector registers with the operands.
	var out [8][4]uint64
	countNibbles8(&p[0], n32, 0, &out)
	for k, lanes := range out {
		h[k] += int64(lanes[0] + lanes[1] + lanes[2] + lanes[3])
	}
	out = [8][4]uint64{}
	countNibbles8(&p[0], n32, 8, &out)
	for k, lanes := range out {
		h[8+k] += int64(lanes[0] + lanes[1] + lanes[2] + lanes[3])
	}
	return p[n32*32:]
}

// exceedsE4M3 is ExceedsE4M3 for n > 0 blocks of bl32 32-byte vectors.
//
//go:noescape
func exceedsE4M3(p *byte, bl32 int, scales *byte, n int, thr *[256]int8) uint64

// exceedsVector runs ExceedsE4M3's AVX2 kernel, if the machine has AVX2.
func exceedsVector(p []byte, bl int, scales []byte, thr *[256]int8) (uint64, bool) {
	if !useAVX2 || len(scales) == 0 {
		return 0, false
	}
	return exceedsE4M3(&p[0], bl/32, &scales[0], len(scales), thr), true
}

// tallyE8M0 counts the bytes 0 and 255 of n32 blocks of 32 bytes from p
// into out[0] and out[1], and puts the smallest and the largest of the
// others in out[2] and out[3]: 255 and 0 when there is none.
//
//go:noescape
func tallyE8M0(p *byte, n32 int, out *[4]uint64)

// addVector counts the whole 32-byte blocks of p and returns the rest.
func (t *E8M0Tally) addVector(p []byte) []byte {
	n32 := len(p) / 32
	if !useAVX2 || n32 == 0 {
		return p
	}
	var out [4]uint64
	tallyE8M0(&p[0], n32, &out)
	t.Zero += int64(out[0])
	t.NaN += int64(out[1])
	t.span(byte(out[2]), byte(out[3]))
	return p[n32*32:]
}

package codecs

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dsfs/dsfs/simd"
)

// Block geometry of the FP4 formats, in elements.
const (
	// MXBlock is the MXFP4 block: 32 E2M1 codes (16 bytes) share one E8M0
	// scale byte. The Engram FP4 tables use the same block.
	MXBlock = 32
	// NVBlock is the NVFP4 block: 16 E2M1 codes (8 bytes) share one E4M3
	// scale byte, so one MXFP4 block is two NVFP4 blocks.
	NVBlock = 16
)

// window is the number of octaves E4M3 holds exactly: 2^-9 .. 2^8.
const window = E4M3MaxPow2 - E4M3MinPow2 + 1

// GlobalExponent returns g, the exponent of the NVFP4 global scale
// weight_scale_2 = 2^g, of one group of E8M0 scale tensors: w1 and w3 of an
// expert together, w2 alone. With E the exponents b-127 of every non-NaN
// byte b, lo = min E and hi = max E:
//
//   - hi-lo <= 17: every ratio fits E4M3's 18 exact octaves, and
//     g = round-half-to-even((lo+hi+1)/2), the seed's centring, except that g
//     is capped at 127 so that 2^g stays a finite float32 (only a group whose
//     every scale is 2^127 would reach 128; its ratios are then 2^0);
//   - otherwise g = k+9 for the window [k, k+17] holding the most elements
//     of E, the smallest k on ties. Windows lie inside the exponents E8M0 can
//     hold (k in [-127, 110]), so 2^g is a normal float32 and a few outlier
//     scales (all-zero blocks often carry byte 0) cannot push every ordinary
//     block out of the window;
//   - no non-NaN scale: g = 0.
//
// One vector pass (simd.E8M0Tally) decides it for scales that fit one
// window but for byte-0 outliers, as a checkpoint's do; any others are
// counted by value.
func GlobalExponent(groups ...[]byte) int {
	var t simd.E8M0Tally
	for _, p := range groups {
		t.Add(p)
	}
	if g, ok := tallied(t); ok {
		return g
	}
	var h scaleHistogram
	for _, p := range groups {
		h.add(p)
	}
	return h.globalExponent()
}

// tallied is GlobalExponent of the scales of t, and true, where their
// counts by value cannot change it:
//
//   - the non-NaN bytes span less than a window: they are centred;
//   - the bytes other than 0 and 255 (rest of them, from Lo to Hi) span less
//     than a window that leaves out byte 0 (Lo >= window): the fullest
//     windows are then the one at byte 0, holding the Zero bytes 0, and
//     those holding all the rest, the lowest of which starts at Hi-window+1;
//     the one at byte 0 wins ties.
func tallied(t simd.E8M0Tally) (int, bool) {
	rest := t.N - t.NaN - t.Zero
	switch {
	case t.Zero == 0 && rest == 0:
		return 0, true
	case rest == 0:
		return centred(0, 0), true
	case t.Zero == 0 && int(t.Hi)-int(t.Lo) < window:
		return centred(int(t.Lo), int(t.Hi)), true
	case int(t.Hi) < window:
		return centred(0, int(t.Hi)), true
	case int(t.Hi)-int(t.Lo) < window && int(t.Lo) >= window:
		k := int(t.Hi) - window + 1
		if t.Zero >= rest {
			k = 0
		}
		return k - 127 - E4M3MinPow2, true
	}
	return 0, false
}

// centred is GlobalExponent of non-NaN scale bytes from lo to hi, less
// than window apart.
func centred(lo, hi int) int {
	n := lo + hi + 1 - 2*127 // 2 x (lo+hi+1)/2 in exponents
	g := n >> 1              // floor(n/2)
	if n&1 != 0 && g&1 != 0 {
		g++ // n/2 is a half: round to the even neighbour
	}
	return min(g, 127)
}

// scaleHistogram counts E8M0 scale bytes by value: what GlobalExponent
// needs of scales its tally cannot decide.
type scaleHistogram [256]int64

// add counts every byte of scales.
func (h *scaleHistogram) add(scales []byte) {
	// Four sub-histograms keep runs of equal bytes (scales cluster) from
	// serialising on one counter.
	var c [4][256]uint32
	for len(scales) > 0 {
		n := min(len(scales), 1<<30) // keeps the uint32 counters from wrapping
		chunk := scales[:n]
		scales = scales[n:]
		i := 0
		for ; i+4 <= len(chunk); i += 4 {
			c[0][chunk[i]]++
			c[1][chunk[i+1]]++
			c[2][chunk[i+2]]++
			c[3][chunk[i+3]]++
		}
		for ; i < len(chunk); i++ {
			c[0][chunk[i]]++
		}
		for b := range h {
			h[b] += int64(c[0][b]) + int64(c[1][b]) + int64(c[2][b]) + int64(c[3][b])
		}
		c = [4][256]uint32{}
	}
}

// globalExponent is GlobalExponent of the scales counted.
func (h *scaleHistogram) globalExponent() int {
	lo, hi := -1, -1
	for b := range E8M0NaN {
		if h[b] != 0 {
			if lo < 0 {
				lo = b
			}
			hi = b
		}
	}
	if lo < 0 {
		return 0
	}
	if hi-lo < window {
		return centred(lo, hi)
	}
	var sum int64
	for b := range window {
		sum += h[b]
	}
	best, bestK := sum, 0
	for k := 1; k+window <= E8M0NaN; k++ {
		sum += h[k+window-1] - h[k-1]
		if sum > best {
			best, bestK = sum, k
		}
	}
	return bestK - 127 - E4M3MinPow2
}

// WeightScale2 returns weight_scale_2 = 2^g, the F32 global scale of an NVFP4
// tensor. g from GlobalExponent is in [-126, 127], where this is exact.
func WeightScale2(g int) float32 { return float32(math.Ldexp(1, g)) }

// NVFP4WeightScale writes the NVFP4 weight_scale bytes (F8_E4M3, one per 16
// elements) for a run of MXFP4 scale bytes: each source scale 2^(b-127)
// becomes the E4M3 of 2^(b-127-g), written twice. Ratios outside
// [2^-9, 2^8] are clamped to the nearer end; NaN (255) becomes 0x7F. It
// returns how many source scales it clamped, NaN not counted.
// Row geometry: a row of in/32 scale bytes gives a row of in/16 bytes, so
// len(dst) must be 2*len(scale).
func NVFP4WeightScale(dst, scale []byte, g int) (clamped int) {
	checkLen("NVFP4WeightScale dst", len(dst), 2*len(scale))
	return simd.Pow2ScalesE4M3(dst, scale, g)
}

// NVFP4Counts counts the source 32-blocks of an MXFP4 tensor transcoded to
// NVFP4 with a given global exponent.
type NVFP4Counts struct {
	Blocks  int64 `json:"blocks"`
	Clamped int64 `json:"clamped"` // scale ratio outside [2^-9, 2^8]
	Lossy   int64 `json:"lossy"`   // clamped and holding a nonzero-magnitude code
	NaN     int64 `json:"nan"`     // scale byte 255
}

// Add adds o to c.
func (c *NVFP4Counts) Add(o NVFP4Counts) {
	c.Blocks += o.Blocks
	c.Clamped += o.Clamped
	c.Lossy += o.Lossy
	c.NaN += o.NaN
}

// CountNVFP4 counts the blocks of a run of MXFP4 rows (weight: packed E2M1,
// 16 bytes per block; scale: one E8M0 byte per block) that NVFP4WeightScale
// clamps with global exponent g, and those of them whose decode changes: a
// clamped block is lossy only if some code has a nonzero magnitude
// (code&7 != 0). NaN blocks are counted apart, never as clamped.
func CountNVFP4(weight, scale []byte, g int) NVFP4Counts {
	checkLen("CountNVFP4 weight", len(weight), MXBlock/2*len(scale))
	c := NVFP4Counts{Blocks: int64(len(scale))}
	for i, b := range scale {
		if b == E8M0NaN {
			c.NaN++
			continue
		}
		if k := int(b) - 127 - g; k >= E4M3MinPow2 && k <= E4M3MaxPow2 {
			continue
		}
		c.Clamped++
		w := weight[MXBlock/2*i:]
		const magnitudes = 0x7777777777777777 // the magnitude bits of 16 codes
		if (binary.LittleEndian.Uint64(w)|binary.LittleEndian.Uint64(w[8:]))&magnitudes != 0 {
			c.Lossy++
		}
	}
	return c
}

// DecodeMXFP4 decodes a run of MXFP4 blocks to float32: value =
// E2M1(code) x 2^(b-127), rounded once (so 6 x 2^127 overflows to infinity as
// float32 must). weight holds 16 bytes per block, scale one byte per block,
// and dst 32 values per block.
func DecodeMXFP4(dst []float32, weight, scale []byte) {
	checkLen("DecodeMXFP4 weight", len(weight), MXBlock/2*len(scale))
	checkLen("DecodeMXFP4 dst", len(dst), MXBlock*len(scale))
	for i, b := range scale {
		decodeFP4(dst[MXBlock*i:MXBlock*(i+1)], weight[MXBlock/2*i:MXBlock/2*(i+1)], E8M0ToFloat32(b), 1)
	}
}

// DecodeNVFP4 decodes a run of NVFP4 blocks to float32: value =
// E2M1(code) x E4M3(weight_scale) x weight_scale_2, multiplied in that order.
// weight holds 8 bytes per block, weightScale one byte per block, and dst 16
// values per block. Where the scale ratio was not clamped the result equals
// DecodeMXFP4 of the source bit for bit: the first product is exact and the
// second rounds the same real number.
func DecodeNVFP4(dst []float32, weight, weightScale []byte, weightScale2 float32) {
	checkLen("DecodeNVFP4 weight", len(weight), NVBlock/2*len(weightScale))
	checkLen("DecodeNVFP4 dst", len(dst), NVBlock*len(weightScale))
	for i, b := range weightScale {
		decodeFP4(dst[NVBlock*i:NVBlock*(i+1)], weight[NVBlock/2*i:NVBlock/2*(i+1)], E4M3ToFloat32(b), weightScale2)
	}
}

// decodeFP4 writes (E2M1(code) x s1) x s2 for the codes packed in w.
func decodeFP4(dst []float32, w []byte, s1, s2 float32) {
	dst = dst[:2*len(w)]
	for j, p := range w {
		dst[2*j] = e2m1Values[p&15] * s1 * s2
		dst[2*j+1] = e2m1Values[p>>4] * s1 * s2
	}
}

// checkLen panics when a caller passes slices of mismatched geometry: a
// programming error in the view, never a property of the data.
func checkLen(what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("codecs: %s has length %d, want %d", what, got, want))
	}
}

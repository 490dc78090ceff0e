package synth

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// Values are drawn from small precomputed tables indexed by PRNG bits, so a
// gigabyte costs table lookups, not per-element float math. Every table is
// built from integer arithmetic (an Irwin-Hall sum of twelve uniforms stands
// in for a normal) and single rounded float operations, so the bytes are the
// same on every platform: no transcendental function, no fusable a*b+c.

// tableSize is the number of entries of every lookup table: 16 PRNG bits
// pick one entry.
const tableSize = 1 << 16

// tableSeed seeds the PRNG that fills the tables.
const tableSeed = 0x6473_6673_7379_6e74 // "dsfssynt"

// tables holds every lookup table; build it once with getTables.
type tables struct {
	// normal holds samples of a bell curve with mean 0 and standard deviation 1.
	normal [tableSize]float64
	// fp4 holds, per code-width class, two packed bytes (four E2M1 codes):
	// the nearest E2M1 value to |N(0, s)| with a random sign, so small
	// magnitudes dominate and negative zero (code 8) occurs.
	fp4 [len(fp4Widths)][tableSize]uint16
	// fp8Weight holds two E4M3 bytes of N(0, fp8WeightSD), saturated at
	// 448: the range a 32x32 block scale maps the block maximum into.
	fp8Weight [tableSize]uint16
	// engram holds two E4M3 bytes of N(0, 1).
	engram [tableSize]uint16
	// bf16Weight holds one BF16 value of N(0, 0.02).
	bf16Weight [tableSize]uint16
	// Small signed integer offsets, indexed by 8 PRNG bits: a rounded
	// bell curve clamped to a few units.
	rowOffset [256]int8 // round(N(0, 1)) in [-3, 3]: a row's base exponent around the tensor's
	blockJit  [256]int8 // round(N(0, 1.2)) in [-3, 3]: a block's exponent around its row's
	fp8Scale  [256]int8 // round(N(0, 0.8)) in [-2, 2]: an FP8 block scale around 2^-6
	engramRow [256]int8 // round(N(0, 1.2)) in [-3, 3]: an Engram row's scale around 2^-4
}

// fp4Widths are the standard deviations, in E2M1 units, of the codes of a
// 32-block. A block's E8M0 scale puts its largest magnitude in (3, 6], so a
// normal block has a deviation of about 1.3 to 2.6 units; each block picks
// one of these widths.
var fp4Widths = [4]float64{1.3, 1.6, 2.0, 2.5}

// fp8WeightSD puts the largest of a 32x32 block's 1024 normal values near
// 448, as a block scale chosen from the block maximum does.
const fp8WeightSD = 100

var getTables = sync.OnceValue(buildTables)

func buildTables() *tables {
	t := new(tables)
	rng := rand.New(rand.NewPCG(tableSeed, 1))
	for i := range t.normal {
		t.normal[i] = irwinHall(rng)
	}
	draw := func() float64 { return t.normal[rng.Uint64()>>48] }
	for w, s := range fp4Widths {
		for i := range t.fp4[w] {
			var v uint16
			for k := range 4 {
				v |= uint16(e2m1(float64(draw()*s), rng.Uint64()&1 != 0)) << (4 * k)
			}
			t.fp4[w][i] = v
		}
	}
	for i := range tableSize {
		t.fp8Weight[i] = uint16(e4m3(draw()*fp8WeightSD)) | uint16(e4m3(draw()*fp8WeightSD))<<8
		t.engram[i] = uint16(e4m3(draw())) | uint16(e4m3(draw()))<<8
		t.bf16Weight[i] = bf16(draw() * 0.02)
	}
	for i := range 256 {
		t.rowOffset[i] = roundClamp(draw(), 3)
		t.blockJit[i] = roundClamp(draw()*1.2, 3)
		t.fp8Scale[i] = roundClamp(draw()*0.8, 2)
		t.engramRow[i] = roundClamp(draw()*1.2, 3)
	}
	return t
}

// irwinHall returns the sum of twelve uniforms on [0, 1) minus 6: a bell
// curve with mean 0 and variance 1, truncated at +-6, computed exactly.
func irwinHall(rng *rand.Rand) float64 {
	var sum int64
	for range 3 {
		x := rng.Uint64()
		for k := range 4 {
			sum += int64(x >> (16 * k) & 0xffff)
		}
	}
	// sum/65536 is exact; the mean of a uniform on {0..65535}/65536 is
	// 0.5 - 2^-17, which the -6 leaves as a negligible bias.
	return float64(sum)/tableSize - 6
}

func roundClamp(x float64, lim int) int8 {
	r := int(math.RoundToEven(x))
	return int8(max(-lim, min(lim, r)))
}

// e2m1Grid is the magnitude of E2M1 codes 0..7.
var e2m1Grid = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// e2m1 returns the E2M1 code nearest to |x| (ties to the even code), with
// the sign bit set when neg is.
func e2m1(x float64, neg bool) byte {
	x = math.Abs(x)
	code := byte(7)
	for c := range 7 {
		mid := (e2m1Grid[c] + e2m1Grid[c+1]) / 2
		if x < mid || x == mid && c%2 == 0 {
			code = byte(c)
			break
		}
	}
	if neg {
		code |= 8
	}
	return code
}

// e4m3 encodes x as E4M3 (fn), rounding to nearest even and saturating at
// +-448, so it never yields a NaN byte.
func e4m3(x float64) byte {
	var sign byte
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if x > 448 {
		return sign | 0x7e
	}
	if x < 1.0/64 { // subnormal: multiples of 2^-9
		m := math.RoundToEven(x * 512)
		return sign | byte(m) // m == 8 is 0x08, the smallest normal
	}
	frac, exp := math.Frexp(x) // x = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1
	q := int(math.RoundToEven((frac*2 - 1) * 8))
	if q == 8 {
		e, q = e+1, 0
	}
	return sign | byte(e+7)<<3 | byte(q)
}

// bf16 encodes x as BF16 bits, rounding the float32 value to nearest even.
func bf16(x float64) uint16 {
	b := math.Float32bits(float32(x))
	return uint16((b + 0x7fff + (b >> 16 & 1)) >> 16)
}

// The fillers below write rows [r0, r1) of one unit into bufs (one buffer
// per tensor of the unit, holding exactly those rows), drawing from rng.

// E8M0 exponent layout of a routed expert: the scales of normal blocks sit
// in [c-6, c+6] around the expert's centre c, outliers at most at c+11, so
// every nonzero block of an expert fits the 18 octaves an E4M3 scale holds
// exactly (the NVFP4 view stays lossless on these presets).
const (
	mxfp4Centre     = 127 - 7 // the typical expert scale, 2^-7
	mxfp4OutlierUp  = 6       // octaves an outlier block sits above its row
	mxfp4OutlierMax = 11      // octaves above the centre no block exceeds
	// Per 65536 blocks (16 PRNG bits): all-zero blocks, half of them with
	// scale byte 0 as real checkpoints have, and outliers.
	mxfp4ZeroRate    = 128
	mxfp4OutlierRate = 16
)

// fillMXFP4 writes packed E2M1 codes ([rows, in/2] I8) and their E8M0
// scales ([rows, in/32]). centre is the expert's typical scale byte.
func fillMXFP4(t *tables, rng *rand.PCG, centre int, w, s []byte, rows int) {
	blocks := len(s) / rows
	for r := range rows {
		base := centre + int(t.rowOffset[rng.Uint64()>>56])
		wr := w[r*blocks*16 : (r+1)*blocks*16]
		for b := range blocks {
			x := rng.Uint64()
			sel := x & 0xffff
			e := base + int(t.blockJit[x>>16&0xff])
			tab := &t.fp4[x>>24&3]
			blk := wr[b*16 : b*16+16]
			for k := 0; k < 16; k += 8 {
				y := rng.Uint64()
				binary.LittleEndian.PutUint16(blk[k:], tab[y&0xffff])
				binary.LittleEndian.PutUint16(blk[k+2:], tab[y>>16&0xffff])
				binary.LittleEndian.PutUint16(blk[k+4:], tab[y>>32&0xffff])
				binary.LittleEndian.PutUint16(blk[k+6:], tab[y>>48])
			}
			switch {
			case sel < mxfp4ZeroRate:
				clear(blk)
				if sel&1 == 0 {
					e = 0
				}
			case sel < mxfp4ZeroRate+mxfp4OutlierRate:
				e = min(e+mxfp4OutlierUp, centre+mxfp4OutlierMax)
			}
			s[r*blocks+b] = byte(e)
		}
	}
}

// fillPairs fills dst with two-byte entries of tab.
func fillPairs(tab *[tableSize]uint16, rng *rand.PCG, dst []byte) {
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		y := rng.Uint64()
		binary.LittleEndian.PutUint64(dst[i:], uint64(tab[y&0xffff])|uint64(tab[y>>16&0xffff])<<16|
			uint64(tab[y>>32&0xffff])<<32|uint64(tab[y>>48])<<48)
	}
	if i < len(dst) {
		var tail [8]byte
		y := rng.Uint64()
		binary.LittleEndian.PutUint64(tail[:], uint64(tab[y&0xffff])|uint64(tab[y>>16&0xffff])<<16|
			uint64(tab[y>>32&0xffff])<<32|uint64(tab[y>>48])<<48)
		copy(dst[i:], tail[:])
	}
}

// fp8ScaleCentre is the typical E8M0 scale of an FP8 32x32 block, 2^-6.
const fp8ScaleCentre = 127 - 6

// fillFP8 writes E4M3 weights and their E8M0 block scales (2^-8..2^-4).
func fillFP8(t *tables, rng *rand.PCG, w, s []byte) {
	fillPairs(&t.fp8Weight, rng, w)
	for i := range s {
		s[i] = byte(fp8ScaleCentre + int(t.fp8Scale[rng.Uint64()>>56]))
	}
}

// engramCentre is the typical E8M0 scale of an Engram block, 2^-4.
const engramCentre = 127 - 4

// fillEngram writes E4M3 rows of N(0, 1) and their 1x32 E8M0 scales: a
// per-row exponent spread over a few octaves, each block of the row one
// octave below it (1/8), above it (1/8) or on it.
func fillEngram(t *tables, rng *rand.PCG, w, s []byte, rows int) {
	fillPairs(&t.engram, rng, w)
	blocks := len(s) / rows
	for r := range rows {
		base := engramCentre + int(t.engramRow[rng.Uint64()>>56])
		var bits uint64
		for b := range blocks {
			if b%21 == 0 { // 21 draws of 3 bits per PRNG output
				bits = rng.Uint64()
			}
			e := base
			switch bits & 7 {
			case 0:
				e--
			case 1:
				e++
			}
			bits >>= 3
			s[r*blocks+b] = byte(e)
		}
	}
}

// fillNormal writes BF16 or F32 values mean + sd*N(0, 1), for the small
// tensors (norms, biases, sinks, hyper-connections).
func fillNormal(t *tables, rng *rand.PCG, dst []byte, f32 bool, mean, sd float64) {
	if f32 {
		for i := 0; i+4 <= len(dst); i += 4 {
			v := mean + float64(sd*t.normal[rng.Uint64()>>48])
			binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(float32(v)))
		}
		return
	}
	for i := 0; i+2 <= len(dst); i += 2 {
		v := mean + float64(sd*t.normal[rng.Uint64()>>48])
		binary.LittleEndian.PutUint16(dst[i:], bf16(v))
	}
}

// fillHash writes a hash layer's tid2eid table: little-endian I64 or I32
// expert ids, each row k distinct experts drawn uniformly from
// [0, experts), as a router's top-k never picks one expert twice.
func fillHash(rng *rand.PCG, dst []byte, i64 bool, experts, k int) {
	size := 4
	if i64 {
		size = 8
	}
	row := make([]uint64, 0, k)
	for i := 0; i+size*k <= len(dst); i += size * k {
		row = row[:0]
		for len(row) < k {
			if e := rng.Uint64() % uint64(experts); !slices.Contains(row, e) {
				row = append(row, e)
			}
		}
		for j, e := range row {
			if i64 {
				binary.LittleEndian.PutUint64(dst[i+8*j:], e)
			} else {
				binary.LittleEndian.PutUint32(dst[i+4*j:], uint32(e))
			}
		}
	}
}

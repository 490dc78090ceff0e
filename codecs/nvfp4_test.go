package codecs

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// repeat returns n copies of byte b.
func repeat(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// cat joins byte slices.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// refGlobalExponent states the FORMATS.md rule naively: exponents of the
// non-NaN bytes, min/max centring when they span at most 18 octaves, else
// the fullest window inside E8M0's exponents, smallest k on ties.
func refGlobalExponent(groups ...[]byte) int {
	var es []int
	for _, g := range groups {
		for _, b := range g {
			if b != 255 {
				es = append(es, int(b)-127)
			}
		}
	}
	if len(es) == 0 {
		return 0
	}
	lo, hi := es[0], es[0]
	for _, e := range es {
		lo, hi = min(lo, e), max(hi, e)
	}
	if hi-lo <= 17 {
		// Python's round((lo+hi)/2 + 0.5): round half to even.
		return min(int(math.RoundToEven(float64(lo+hi+1)/2)), 127)
	}
	best, bestK := -1, 0
	for k := -127; k+17 <= 127; k++ {
		n := 0
		for _, e := range es {
			if e >= k && e <= k+17 {
				n++
			}
		}
		if n > best {
			best, bestK = n, k
		}
	}
	return bestK + 9
}

func TestGlobalExponent(t *testing.T) {
	for _, c := range []struct {
		name   string
		groups [][]byte
		want   int
	}{
		{"none", nil, 0},
		{"empty", [][]byte{{}}, 0},
		{"all NaN", [][]byte{repeat(255, 10)}, 0},
		{"one scale 2^0: (0+0+1)/2 = .5 -> 0", [][]byte{{127}}, 0},
		{"one scale 2^1: 1.5 -> 2", [][]byte{{128}}, 2},
		{"one scale 2^-1: -.5 -> 0", [][]byte{{126}}, 0},
		{"one scale 2^-2: -1.5 -> -2", [][]byte{{125}}, -2},
		{"2^0 and 2^1: 1", [][]byte{{127, 128, 255}}, 1},
		{"span 17 centred", [][]byte{{100, 117, 110}}, -18},
		{"w1 and w3 together", [][]byte{{100, 105}, {117}}, -18},
		{"byte 0 alone: -126.5 -> -126", [][]byte{{0, 0}}, -126},
		{"every scale 2^127: 127.5 -> 128, capped", [][]byte{{254}}, 127},
		{"2^126 and 2^127", [][]byte{{253, 254}}, 127},
		// Exponents -7..3 plus zero-block outliers at 2^-127: the windows
		// holding the cluster start at k in [-14, -7]; the smallest wins.
		{"outliers at byte 0", [][]byte{cat(repeat(0, 5), []byte{120, 122, 125, 127, 128, 130})}, -14 + 9},
		// As many bytes 0 as others: the window at byte 0 wins the tie.
		{"byte-0 outliers tie", [][]byte{{0, 0, 0, 120, 125, 130, 255}}, -127 + 9},
		{"byte-0 outliers one fewer", [][]byte{{0, 0, 120}, {125, 130}}, 130 - 17 - 127 + 9},
		// Bytes 0 beside scales from byte 10: the window at byte 0 holds
		// some of both.
		{"byte-0 outliers near the cluster", [][]byte{{0, 0, 10, 17, 30, 31, 32}}, -127 + 9},
		{"outliers at both ends", [][]byte{cat(repeat(0, 3), repeat(254, 3), repeat(127, 4))}, -17 + 9},
		// Two clusters of equal size 60 octaves apart: the lower one.
		{"tie picks smallest k", [][]byte{{60, 61, 120, 121}}, 61 - 127 - 17 + 9},
		// A majority at 2^-127 holds the window at the bottom of E8M0.
		{"window stays inside E8M0", [][]byte{cat(repeat(0, 9), repeat(130, 2))}, -127 + 9},
		{"window at the top", [][]byte{cat(repeat(254, 9), repeat(0, 2))}, 110 + 9},
	} {
		if got := GlobalExponent(c.groups...); got != c.want {
			t.Errorf("%s: GlobalExponent = %d, want %d", c.name, got, c.want)
		}
		if got := refGlobalExponent(c.groups...); got != c.want {
			t.Errorf("%s: the reference says %d, want %d", c.name, got, c.want)
		}
	}
}

func TestGlobalExponentRandom(t *testing.T) {
	rng, seed := newRand(t)
	for i := range 600 {
		// A cluster, sometimes narrow, plus a few outliers and NaNs; every
		// other one with byte-0 outliers alone, from none to most of the
		// bytes, as GlobalExponent decides without counting by value.
		n := 1 + rng.IntN(200)
		centre, spread := rng.IntN(255), 1+rng.IntN(30)
		outliers, zeros := 3, 5
		if i%2 == 1 {
			outliers, zeros = 0, rng.IntN(100)
		}
		s := make([]byte, n)
		for i := range s {
			switch r := rng.IntN(100); {
			case r < outliers:
				s[i] = byte(rng.IntN(256))
			case r < outliers+zeros:
				s[i] = 0
			default:
				s[i] = byte(min(max(centre+rng.IntN(spread)-spread/2, 0), 254))
			}
		}
		cut := rng.IntN(n + 1)
		got, want := GlobalExponent(s[:cut], s[cut:]), refGlobalExponent(s)
		if got != want {
			t.Fatalf("seed %d: GlobalExponent(%v) = %d, want %d", seed, s, got, want)
		}
		if g := got; g < -126 || g > 127 {
			t.Fatalf("seed %d: g = %d leaves 2^g outside the normal float32s", seed, g)
		}
		var h scaleHistogram
		h.add(s)
		if h.globalExponent() != got {
			t.Fatalf("seed %d: histogram disagrees", seed)
		}
	}
}

func TestNVFP4WeightScale(t *testing.T) {
	const g = -5
	src := []byte{127, 127 - 5, 127 - 14, 127 - 15, 127 + 3, 127 + 4, 0, 254, 255}
	want := []byte{
		0x60, // 2^5: (5+7)<<3
		0x38, // 2^0
		0x01, // 2^-9
		0x01, // 2^-10 clamped to 2^-9
		0x78, // 2^8
		0x78, // 2^9 clamped to 2^8
		0x01, // 2^-122 clamped
		0x78, // 2^132 clamped
		0x7f, // NaN
	}
	dst := make([]byte, 2*len(src))
	if clamped := NVFP4WeightScale(dst, src, g); clamped != 4 {
		t.Errorf("%d scales clamped, want 4", clamped)
	}
	for i := range src {
		if dst[2*i] != want[i] || dst[2*i+1] != want[i] {
			t.Errorf("scale %d with g=%d: got %#02x %#02x, want %#02x twice", src[i], g, dst[2*i], dst[2*i+1], want[i])
		}
	}
	for b := range 255 {
		e := b - 127 - g
		if e < -9 || e > 8 {
			continue
		}
		NVFP4WeightScale(dst[:2], []byte{byte(b)}, g)
		if v := E4M3ToFloat64(dst[0]) * float64(WeightScale2(g)); v != E8M0ToFloat64(byte(b)) {
			t.Errorf("scale %d: E4M3 %#02x x 2^%d = %v, want 2^%d", b, dst[0], g, v, b-127)
		}
	}
}

// TestNVFP4WeightScaleRuns: runs of every length up to 40, of random scale
// bytes (NaN among them) and at every other offset of the output, give each
// scale's E4M3 of 2^(b-127-g) twice, as one scale at a time does, and
// count the scales CountNVFP4 counts as clamped.
func TestNVFP4WeightScaleRuns(t *testing.T) {
	rng, seed := newRand(t)
	for _, g := range []int{-126, -5, 0, 3, 127} {
		for n := range 41 {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(rng.IntN(256))
			}
			dst := make([]byte, 2*n)
			clamped := NVFP4WeightScale(dst, src, g)
			if want := CountNVFP4(make([]byte, MXBlock/2*n), src, g).Clamped; int64(clamped) != want {
				t.Fatalf("seed %d: g=%d, run of %d: %d clamped, want %d", seed, g, n, clamped, want)
			}
			for i, b := range src {
				want := byte(e4m3NaN)
				if b != E8M0NaN {
					want = E4M3Pow2(int(b) - 127 - g)
				}
				if dst[2*i] != want || dst[2*i+1] != want {
					t.Fatalf("seed %d: g=%d, run of %d, scale %d (%d): got %#02x %#02x, want %#02x twice", seed, g, n, i, b, dst[2*i], dst[2*i+1], want)
				}
			}
		}
	}
}

func TestCountNVFP4(t *testing.T) {
	const g = 0
	zeros := make([]byte, 16)
	negZeros := repeat(0x88, 16) // code 8 in both nibbles: -0
	oneCode := make([]byte, 16)
	oneCode[15] = 0x10 // the last element is 0.5
	for _, c := range []struct {
		name   string
		weight []byte
		scale  byte
		want   NVFP4Counts
	}{
		{"in window", oneCode, 127 + 8, NVFP4Counts{Blocks: 1}},
		{"lowest in window", oneCode, 127 - 9, NVFP4Counts{Blocks: 1}},
		{"clamped high, nonzero code", oneCode, 127 + 9, NVFP4Counts{Blocks: 1, Clamped: 1, Lossy: 1}},
		{"clamped low, nonzero code", oneCode, 0, NVFP4Counts{Blocks: 1, Clamped: 1, Lossy: 1}},
		{"clamped, zero codes", zeros, 0, NVFP4Counts{Blocks: 1, Clamped: 1}},
		{"clamped, negative zero codes", negZeros, 254, NVFP4Counts{Blocks: 1, Clamped: 1}},
		{"NaN", oneCode, 255, NVFP4Counts{Blocks: 1, NaN: 1}},
	} {
		if got := CountNVFP4(c.weight, []byte{c.scale}, g); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	var total NVFP4Counts
	total.Add(CountNVFP4(cat(oneCode, zeros, oneCode), []byte{0, 0, 255}, g))
	total.Add(NVFP4Counts{Blocks: 2, Clamped: 1, Lossy: 1, NaN: 0})
	if want := (NVFP4Counts{Blocks: 5, Clamped: 3, Lossy: 2, NaN: 1}); total != want {
		t.Errorf("sum: got %+v, want %+v", total, want)
	}
}

// randomMXFP4 fills a tensor of random codes whose scales spread over about
// ten octaves around a random centre, with some outliers so that a few
// blocks clamp, some all-zero blocks and a few NaN scales.
func randomMXFP4(rng *rand.Rand, weight, scale []byte) {
	centre := 20 + rng.IntN(200)
	for i := range scale {
		w := weight[16*i : 16*(i+1)]
		for j := range w {
			w[j] = byte(rng.Uint32())
		}
		switch r := rng.IntN(1000); {
		case r < 5:
			scale[i] = 255
		case r < 20:
			scale[i] = byte(rng.IntN(240)) // far outliers: clamped unless near
		case r < 40:
			scale[i] = 0
			clear(w)
		default:
			scale[i] = byte(centre + rng.IntN(11) - 5)
		}
		if rng.IntN(50) == 0 {
			for j := range w {
				w[j] &= 0x88 // only zeros, some negative
			}
		}
	}
}

// TestNVFP4DecodeEqualsMXFP4 is the losslessness property: wherever a block
// is not clamped, and wherever a clamped block holds only zero codes, the
// NVFP4 decode equals the MXFP4 decode bit for bit; a lossy block differs.
func TestNVFP4DecodeEqualsMXFP4(t *testing.T) {
	rng, seed := newRand(t)
	rounds := 40
	if testing.Short() {
		rounds = 5
	}
	var clampedAll, lossy, exact int64
	for range rounds {
		rows, cols := 1+rng.IntN(64), MXBlock*(1+rng.IntN(12))
		n := rows * cols / MXBlock
		w1, s1 := make([]byte, n*16), make([]byte, n)
		randomMXFP4(rng, w1, s1)
		// Bytes of a w3 partner join w1's group.
		w3, s3 := make([]byte, n*16), make([]byte, n)
		randomMXFP4(rng, w3, s3)
		g := GlobalExponent(s1, s3)
		ws := make([]byte, 2*n)
		NVFP4WeightScale(ws, s1, g)

		mx, nv := make([]float32, rows*cols), make([]float32, rows*cols)
		DecodeMXFP4(mx, w1, s1)
		DecodeNVFP4(nv, w1, ws, WeightScale2(g))
		var lossyRun int64
		for i := range n {
			k := int(s1[i]) - 127 - g
			clamped := s1[i] != 255 && (k < -9 || k > 8)
			one := CountNVFP4(w1[16*i:16*(i+1)], s1[i:i+1], g)
			if one.Clamped == 1 != clamped {
				t.Fatalf("seed %d: block %d (scale %d, g %d): clamped count %d", seed, i, s1[i], g, one.Clamped)
			}
			lossyRun += one.Lossy
			clampedAll += one.Clamped
			if !clamped {
				exact++
			}
			same := true
			for j := MXBlock * i; j < MXBlock*(i+1); j++ {
				if !sameBits32(mx[j], nv[j]) {
					same = false
					if !clamped {
						t.Fatalf("seed %d: element %d (scale %d, g %d): MXFP4 %v (%#08x), NVFP4 %v (%#08x)",
							seed, j, s1[i], g, mx[j], math.Float32bits(mx[j]), nv[j], math.Float32bits(nv[j]))
					}
				}
			}
			if same != (one.Lossy == 0) {
				t.Fatalf("seed %d: block %d (scale %d, g %d): decode same %v but lossy %d", seed, i, s1[i], g, same, one.Lossy)
			}
		}
		if c := CountNVFP4(w1, s1, g); c.Lossy != lossyRun || c.Blocks != int64(n) {
			t.Fatalf("seed %d: whole-run counts %+v, blocks %d lossy %d", seed, c, n, lossyRun)
		}
		lossy += lossyRun
	}
	if clampedAll == 0 || lossy == 0 || exact == 0 {
		t.Fatalf("seed %d: the random tensors exercised too little: %d clamped, %d lossy, %d exact blocks", seed, clampedAll, lossy, exact)
	}
}

func TestDecodeMXFP4(t *testing.T) {
	w := make([]byte, 16)
	w[0] = 0x9f  // element 0 code 15 (-6), element 1 code 9 (-0.5)
	w[15] = 0x78 // element 30 code 8 (-0), element 31 code 7 (6)
	dst := make([]float32, 32)
	for _, c := range []struct {
		scale       byte
		e0, e1, e31 float32
	}{
		{127, -6, -0.5, 6},
		{0, float32(math.Ldexp(-6, -127)), float32(math.Ldexp(-0.5, -127)), float32(math.Ldexp(6, -127))},
		{254, float32(math.Inf(-1)), float32(math.Ldexp(-0.5, 127)), float32(math.Inf(1))}, // 6 x 2^127 overflows
		{255, 0, 0, 0},
	} {
		DecodeMXFP4(dst, w, []byte{c.scale})
		if c.scale == 255 {
			for i, v := range dst {
				if v == v {
					t.Errorf("scale 255: element %d = %v, want NaN", i, v)
				}
			}
			continue
		}
		if dst[0] != c.e0 || dst[1] != c.e1 || dst[31] != c.e31 || !math.Signbit(float64(dst[30])) || dst[30] != 0 {
			t.Errorf("scale %d: got %v %v .. %v %v", c.scale, dst[0], dst[1], dst[30], dst[31])
		}
	}
}

func BenchmarkNVFP4WeightScale(b *testing.B) {
	rng, _ := newRand(b)
	src := make([]byte, 1<<18) // the scale of a 2304 x 5120 expert matrix is 368,640 bytes
	for i := range src {
		src[i] = byte(110 + rng.IntN(20))
	}
	dst := make([]byte, 2*len(src))
	g := GlobalExponent(src)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		NVFP4WeightScale(dst, src, g)
	}
}

// BenchmarkGlobalExponent times w1 and w3 of one expert: scales in one
// window but for bytes 0 of all-zero blocks, as a checkpoint's are (one
// vector pass), and scales spread wider, which are counted by value.
func BenchmarkGlobalExponent(b *testing.B) {
	for _, c := range []struct {
		name         string
		centre, span int
		zeros        int // per thousand
	}{
		{"window and byte 0", 120, 18, 2},
		{"wider than a window", 110, 20, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			rng, _ := newRand(b)
			src := make([]byte, 2304*160*2)
			for i := range src {
				src[i] = byte(c.centre + rng.IntN(c.span))
				if rng.IntN(1000) < c.zeros {
					src[i] = 0
				}
			}
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				GlobalExponent(src[:len(src)/2], src[len(src)/2:])
			}
		})
	}
}

func BenchmarkCountNVFP4(b *testing.B) {
	rng, _ := newRand(b)
	n := 1 << 16
	w, s := make([]byte, 16*n), make([]byte, n)
	randomMXFP4(rng, w, s)
	g := GlobalExponent(s)
	b.SetBytes(int64(len(w) + len(s)))
	for b.Loop() {
		CountNVFP4(w, s, g)
	}
}

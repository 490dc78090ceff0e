package codecs

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refEngramBlock transcodes one block naively in float64, straight from
// FORMATS.md: decode, amax, e, divide, nearest grid value with ties to the
// even code.
func refEngramBlock(w []byte, s byte) (codes [MXBlock]byte, scale byte) {
	var v [MXBlock]float64
	amax := 0.0
	for i, b := range w {
		v[i] = refE4M3(b) * math.Ldexp(1, int(s)-127)
		if math.IsNaN(v[i]) || s == 255 {
			return codes, 255
		}
		amax = max(amax, math.Abs(v[i]))
	}
	e := -126
	if amax > 0 {
		e = int(math.Ceil(math.Log2(amax / 6)))
		for 6*math.Ldexp(1, e-1) >= amax { // make it exactly the smallest
			e--
		}
		for 6*math.Ldexp(1, e) < amax {
			e++
		}
		e = min(max(e, -126), 127)
	}
	grid := [8]float64{0, .5, 1, 1.5, 2, 3, 4, 6}
	for i := range v {
		x := v[i] / math.Ldexp(1, e)
		mag := min(math.Abs(x), 6)
		best := 0
		for j := 1; j < 8; j++ {
			d, bd := math.Abs(mag-grid[j]), math.Abs(mag-grid[best])
			if d < bd || d == bd && j%2 == 0 {
				best = j
			}
		}
		codes[i] = byte(best)
		if x < 0 {
			codes[i] |= 8
		}
	}
	return codes, byte(e + 127)
}

// refEngram runs refEngramBlock over a run of blocks.
func refEngram(dstW, dstS, srcW, srcS []byte) EngramCounts {
	c := EngramCounts{Blocks: int64(len(srcS))}
	for i, s := range srcS {
		codes, scale := refEngramBlock(srcW[MXBlock*i:MXBlock*(i+1)], s)
		for j := range MXBlock / 2 {
			dstW[MXBlock/2*i+j] = codes[2*j] | codes[2*j+1]<<4
		}
		dstS[i] = scale
		if scale == 255 {
			c.NaNBlocks++
		}
	}
	return c
}

// refCosine is the per-row cosine computed element by element in float64.
func refCosine(srcW, srcS, dstW, dstS []byte, rows int) []float64 {
	cos := make([]float64, rows)
	per := len(srcS) / rows
	for r := range rows {
		var dot, nv, nr float64
		for i := r * per; i < (r+1)*per; i++ {
			for j := range MXBlock {
				v := refE4M3(srcW[MXBlock*i+j]) * E8M0ToFloat64(srcS[i])
				p := dstW[(MXBlock*i+j)/2]
				if j%2 == 1 {
					p >>= 4
				}
				d := float64(E2M1ToFloat32(p)) * E8M0ToFloat64(dstS[i])
				dot += v * d
				nv += v * v
				nr += d * d
			}
		}
		cos[r] = dot / (math.Sqrt(nv) * math.Sqrt(nr))
		if nv == 0 || nr == 0 {
			cos[r] = math.NaN()
		}
	}
	return cos
}

// checkEngram runs the fast path and the reference on the same blocks and
// fails on the first difference.
func checkEngram(t testing.TB, srcW, srcS []byte, context string) {
	t.Helper()
	n := len(srcS)
	gotW, gotS := make([]byte, 16*n), make([]byte, n)
	wantW, wantS := make([]byte, 16*n), make([]byte, n)
	got, want := EngramFP4(gotW, gotS, srcW, srcS), refEngram(wantW, wantS, srcW, srcS)
	if got != want {
		t.Fatalf("%s: counts %+v, want %+v", context, got, want)
	}
	for i := range n {
		if gotS[i] != wantS[i] || !bytes.Equal(gotW[16*i:16*(i+1)], wantW[16*i:16*(i+1)]) {
			t.Fatalf("%s: block %d (scale %d, E4M3 % x):\n got scale %d codes % x\nwant scale %d codes % x",
				context, i, srcS[i], srcW[32*i:32*(i+1)], gotS[i], gotW[16*i:16*(i+1)], wantS[i], wantW[16*i:16*(i+1)])
		}
	}
}

func TestEngramTies(t *testing.T) {
	// Scale 2^0 and a block maximum of 6 give e = 0, so x = v.
	for _, c := range []struct {
		v    float64
		code byte
	}{
		{0.25, 0}, {0.75, 2}, {1.25, 2}, {1.75, 4}, {2.5, 4}, {3.5, 6}, {5, 6}, // ties to the even code
		{0.5, 1}, {1.5, 3}, {3, 5}, {6, 7}, {0.3125, 1}, {0.1875, 0}, {4.5, 6}, {5.5, 7},
		{-0.25, 8}, {-0.75, 10}, {-5, 14}, {-6, 15},
		{-math.Ldexp(1, -9), 8}, // a tiny negative keeps its sign: -0
		{math.Copysign(0, -1), 0},
	} {
		b := e4m3Byte(t, c.v)
		w := make([]byte, 32)
		w[0] = 0x4c // 6
		w[1] = b
		dstW, dstS := make([]byte, 16), make([]byte, 1)
		EngramFP4(dstW, dstS, w, []byte{127})
		if dstS[0] != 127 {
			t.Fatalf("block max 6 at scale 2^0: new scale %d, want 127", dstS[0])
		}
		if got := dstW[0] >> 4; got != c.code {
			t.Errorf("x = %v (E4M3 %#02x = %v): code %d, want %d", c.v, b, refE4M3(b), got, c.code)
		}
	}
}

// e4m3Byte returns the E4M3 byte holding v exactly, sign of zero included.
func e4m3Byte(t testing.TB, v float64) byte {
	t.Helper()
	for b := range 256 {
		if refE4M3(byte(b)) == v && math.Signbit(refE4M3(byte(b))) == math.Signbit(v) {
			return byte(b)
		}
	}
	t.Fatalf("%v is not an E4M3 value", v)
	return 0
}

// TestEngramExhaustive runs every (scale byte, largest magnitude byte) pair
// against every E4M3 byte that can share a block with that maximum, so each
// entry of the fast path's tables meets the reference at least once.
func TestEngramExhaustive(t *testing.T) {
	var srcW, srcS []byte
	for si := range 256 {
		s := byte(si)
		for top := range 128 {
			var members []byte // every byte whose magnitude is at most top
			for b := range 256 {
				if b&0x7f <= top {
					members = append(members, byte(b))
				}
			}
			for len(members) > 0 {
				n := min(len(members), MXBlock-1)
				block := append([]byte{byte(top) | 0x80*byte(top&1)}, members[:n]...)
				members = members[n:]
				for len(block) < MXBlock {
					block = append(block, byte(top))
				}
				srcW = append(srcW, block...)
				srcS = append(srcS, s)
			}
		}
	}
	checkEngram(t, srcW, srcS, "exhaustive")
}

// randomEngram fills blocks with random E4M3 bytes at one of several
// magnitudes, random scales, and the special blocks: zeros of both signs,
// NaN elements, NaN scales, extreme scales.
func randomEngram(rng *rand.Rand, srcW, srcS []byte) {
	for i := range srcS {
		w := srcW[MXBlock*i : MXBlock*(i+1)]
		limit := 1 + rng.IntN(0x7f) // the block's largest magnitude byte, at most
		for j := range w {
			w[j] = byte(rng.IntN(limit)) | byte(rng.IntN(2))<<7
		}
		srcS[i] = byte(rng.IntN(256))
		switch r := rng.IntN(100); {
		case r < 3:
			srcS[i] = 255
		case r < 6:
			w[rng.IntN(MXBlock)] = 0x7f | byte(rng.IntN(2))<<7
		case r < 10:
			for j := range w {
				w[j] = byte(rng.IntN(2)) << 7
			}
		case r < 15:
			srcS[i] = []byte{0, 1, 2, 240, 247, 253, 254}[rng.IntN(7)]
		}
	}
}

func TestEngramRandom(t *testing.T) {
	rng, seed := newRand(t)
	n := 1 << 14
	if testing.Short() {
		n = 1 << 11
	}
	srcW, srcS := make([]byte, MXBlock*n), make([]byte, n)
	randomEngram(rng, srcW, srcS)
	checkEngram(t, srcW, srcS, fmt.Sprintf("seed %d", seed))
}

func TestEngramSpecialBlocks(t *testing.T) {
	for _, c := range []struct {
		name  string
		w     []byte
		s     byte
		scale byte
		codes byte // every code
	}{
		{"zeros", make([]byte, 32), 127, 1, 0},
		{"negative zeros", repeat(0x80, 32), 254, 1, 0},
		{"NaN scale", repeat(0x38, 32), 255, 255, 0},
		{"NaN element", cat(repeat(0x38, 31), []byte{0x7f}), 127, 255, 0},
		{"negative NaN element", cat([]byte{0xff}, repeat(0xb8, 31)), 0, 255, 0},
		// 448 x 2^127: e = ceil(log2(448/6)) + 127 = 134, capped at 127; every x is 448, clamped to 6.
		{"cap at 127", repeat(0x7e, 32), 254, 254, 0x77},
		// 2^-9 x 2^-127: e = max(-126, -139) = -126; x = 2^-10 rounds to 0, negative to -0.
		{"floor at -126", repeat(0x81, 32), 0, 1, 0x88},
		{"smallest nonzero scale", repeat(0x01, 32), 0, 1, 0},
	} {
		dstW, dstS := make([]byte, 16), make([]byte, 1)
		got := EngramFP4(dstW, dstS, c.w, []byte{c.s})
		nan := int64(0)
		if c.scale == 255 {
			nan = 1
		}
		if got != (EngramCounts{Blocks: 1, NaNBlocks: nan}) || dstS[0] != c.scale || !bytes.Equal(dstW, repeat(c.codes, 16)) {
			t.Errorf("%s: counts %+v, scale %d, codes % x; want scale %d, codes %#02x", c.name, got, dstS[0], dstW, c.scale, c.codes)
		}
		checkEngram(t, c.w, []byte{c.s}, c.name)
	}
}

func TestEngramCosine(t *testing.T) {
	rng, seed := newRand(t)
	rows, cols := 64, 256
	n := rows * cols / MXBlock
	srcW, srcS := make([]byte, MXBlock*n), make([]byte, n)
	for i := range srcW {
		srcW[i] = byte(rng.IntN(0x7f)) | byte(rng.IntN(2))<<7
	}
	for i := range srcS {
		srcS[i] = byte(100 + rng.IntN(50))
	}
	srcS[8*3+2] = 255                 // row 3: a NaN block
	clear(srcW[5*cols : 6*cols])      // row 5: all zero
	copy(srcS[8*7:8*8], repeat(0, 8)) // row 7: tiny, every code 0
	copy(srcW[7*cols:8*cols], repeat(0x01, cols))
	dstW, dstS := make([]byte, 16*n), make([]byte, n)
	EngramFP4(dstW, dstS, srcW, srcS)
	cos := make([]float64, rows)
	EngramCosine(cos, srcW, srcS, dstW, dstS)
	want := refCosine(srcW, srcS, dstW, dstS, rows)
	for r := range rows {
		switch r {
		case 3, 5, 7:
			if !math.IsNaN(cos[r]) {
				t.Errorf("row %d: cosine %v, want NaN", r, cos[r])
			}
			continue
		}
		if math.Abs(cos[r]-want[r]) > 1e-12 || cos[r] < 0.9 || cos[r] > 1 {
			t.Errorf("seed %d: row %d: cosine %v, reference %v", seed, r, cos[r], want[r])
		}
	}
	// A decode that is exactly the source has cosine 1.
	exact := repeat(0x38, cols) // 1.0, coded exactly as 1 x 2^0
	ew, es := make([]byte, 128), make([]byte, 8)
	EngramFP4(ew, es, exact, repeat(127, 8))
	EngramCosine(cos[:1], exact, repeat(127, 8), ew, es)
	if cos[0] != 1 {
		t.Errorf("exact row: cosine %v, want 1", cos[0])
	}
}

func TestEngramGeometryPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"short dstW": func() { EngramFP4(make([]byte, 15), make([]byte, 1), make([]byte, 32), make([]byte, 1)) },
		"short srcW": func() { EngramFP4(make([]byte, 16), make([]byte, 1), make([]byte, 31), make([]byte, 1)) },
		"ragged rows": func() {
			EngramCosine(make([]float64, 3), make([]byte, 8*32), make([]byte, 8), make([]byte, 8*16), make([]byte, 8))
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func FuzzEngramFP4(f *testing.F) {
	f.Add(cat(repeat(0x7e, 32), []byte{254}))
	f.Add(cat(repeat(0x81, 32), []byte{0}))
	f.Add(cat([]byte{0x4c, 0x4a, 0x46, 0x30, 0x28}, make([]byte, 27), []byte{127}))
	f.Add(cat(repeat(0x7f, 32), []byte{3}))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Each 33 bytes: 32 E4M3 bytes and a scale.
		n := len(data) / (MXBlock + 1)
		srcW, srcS := make([]byte, MXBlock*n), make([]byte, n)
		for i := range n {
			copy(srcW[MXBlock*i:], data[(MXBlock+1)*i:(MXBlock+1)*i+MXBlock])
			srcS[i] = data[(MXBlock+1)*i+MXBlock]
		}
		checkEngram(t, srcW, srcS, "fuzz")
		if n > 0 {
			dstW, dstS := make([]byte, 16*n), make([]byte, n)
			EngramFP4(dstW, dstS, srcW, srcS)
			cos := make([]float64, 1)
			EngramCosine(cos, srcW, srcS, dstW, dstS)
			if want := refCosine(srcW, srcS, dstW, dstS, 1)[0]; math.IsNaN(cos[0]) != math.IsNaN(want) || math.Abs(cos[0]-want) > 1e-12 {
				t.Fatalf("cosine %v, reference %v", cos[0], want)
			}
		}
	})
}

// benchEngram is an Engram table slice of 4096 rows (1 MiB of input).
func benchEngram(b *testing.B) (srcW, srcS, dstW, dstS []byte) {
	rng, _ := newRand(b)
	n := 4096 * 8
	srcW, srcS = make([]byte, MXBlock*n), make([]byte, n)
	for i := range srcW {
		srcW[i] = byte(rng.IntN(0x7f)) | byte(rng.IntN(2))<<7
	}
	for i := range srcS {
		srcS[i] = byte(110 + rng.IntN(20))
	}
	return srcW, srcS, make([]byte, 16*n), make([]byte, n)
}

func BenchmarkEngramFP4(b *testing.B) {
	srcW, srcS, dstW, dstS := benchEngram(b)
	b.SetBytes(int64(len(srcW) + len(srcS)))
	for b.Loop() {
		EngramFP4(dstW, dstS, srcW, srcS)
	}
}

func BenchmarkEngramCosine(b *testing.B) {
	srcW, srcS, dstW, dstS := benchEngram(b)
	EngramFP4(dstW, dstS, srcW, srcS)
	cos := make([]float64, len(srcS)/8)
	b.SetBytes(int64(len(srcW) + len(srcS)))
	for b.Loop() {
		EngramCosine(cos, srcW, srcS, dstW, dstS)
	}
}

func TestEngramScalesMatchEngramFP4(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	const blocks = 4096
	srcW := make([]byte, MXBlock*blocks)
	srcS := make([]byte, blocks)
	for i := range srcW {
		srcW[i] = byte(rng.Uint32())
	}
	for i := range srcS {
		srcS[i] = byte(rng.Uint32())
	}
	for i := range blocks / 16 { // zero blocks of either sign
		for j := range MXBlock {
			srcW[MXBlock*16*i+j] = byte(i&1) << 7
		}
	}
	dstW := make([]byte, MXBlock/2*blocks)
	want := make([]byte, blocks)
	got := make([]byte, blocks)
	cw := EngramFP4(dstW, want, srcW, srcS)
	cg := EngramScales(got, srcW, srcS)
	if !bytes.Equal(got, want) || cw != cg {
		t.Fatalf("seed %d: EngramScales differs from EngramFP4 (counts %+v vs %+v)", seed, cg, cw)
	}
}

func BenchmarkEngramScales(b *testing.B) {
	srcW, srcS, _, dstS := benchEngram(b)
	b.SetBytes(int64(len(srcW) + len(srcS)))
	for b.Loop() {
		EngramScales(dstS, srcW, srcS)
	}
}

package simd

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// fromAlphabets returns, for each length and each alphabet, that many
// random bytes of the alphabet (nil: of every byte).
func fromAlphabets(rng *rand.Rand, lengths []int, alphabets [][]byte) [][]byte {
	var cases [][]byte
	for _, n := range lengths {
		for _, a := range alphabets {
			p := make([]byte, n)
			for i := range p {
				if a == nil {
					p[i] = byte(rng.Uint32())
				} else {
					p[i] = a[rng.IntN(len(a))]
				}
			}
			cases = append(cases, p)
		}
	}
	return cases
}

// benchBytes is what the counting benchmarks count: 128 KiB of random
// bytes, the same in every run.
func benchBytes() []byte {
	p := make([]byte, 128<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// TestE4M3Tally compares Add, with the vector kernel where there is one,
// with counting byte by byte, on random codes drawn from a few alphabets
// so that every counted code is frequent, and on long runs of one code
// that fill the kernel's byte counters.
func TestE4M3Tally(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	alphabets := [][]byte{
		{0x00, 0x80, 0x7f, 0xff, 0x01, 0x81, 0x7e, 0xfe},
		{0x00, 0x80},
		{0x7f, 0xff, 0x7e},
		nil, // every byte
	}
	cases := fromAlphabets(rng, []int{0, 1, 31, 32, 33, 255 * 32, 255*32 + 1, 256 * 32, 20000}, alphabets)
	for _, b := range []byte{0x00, 0x80, 0x7f, 0xff, 0x7e} {
		cases = append(cases, bytes.Repeat([]byte{b}, 1<<20+7))
	}
	eachCounter(t, func(t *testing.T) {
		for _, p := range cases {
			checkE4M3Tally(t, rng, seed, p)
		}
	})
}

// checkE4M3Tally compares the tally of p, added in two parts split at
// random, with counting p byte by byte.
func checkE4M3Tally(t *testing.T, rng *rand.Rand, seed uint64, p []byte) {
	t.Helper()
	var got, want E4M3Tally
	cut := rng.IntN(len(p) + 1)
	got.Add(p[:cut])
	got.Add(p[cut:])
	want.N = int64(len(p))
	for _, b := range p {
		switch {
		case b&0x7f == 0x7f:
			want.NaN++
		case b == 0x00:
			want.Zero++
		case b == 0x80:
			want.NegZero++
		}
		if b&0x7f != 0x7f {
			want.MaxMag = max(want.MaxMag, b&0x7f)
		}
	}
	if got != want {
		t.Fatalf("seed %d: %d bytes cut at %d, first % x: got %+v, want %+v",
			seed, len(p), cut, p[:min(len(p), 8)], got, want)
	}
}

func BenchmarkE4M3Tally(b *testing.B) {
	p := benchBytes()
	b.SetBytes(int64(len(p)))
	var t E4M3Tally
	for b.Loop() {
		t.Add(p)
	}
}

// TestNibbleHist compares Add, with the vector kernel where there is one,
// with counting nibble by nibble, on random bytes drawn from a few
// alphabets and on runs of one byte that fill the kernel's counters.
func TestNibbleHist(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	alphabets := [][]byte{
		{0x00, 0x88, 0x08, 0x80, 0x7f, 0xf7},
		{0x12, 0x34},
		nil, // every byte
	}
	cases := fromAlphabets(rng, []int{0, 1, 31, 32, 33, 255, 256, 127 * 32, 127*32 + 1, 128 * 32, 20000}, alphabets)
	for _, b := range []byte{0x00, 0xff, 0x7f, 0x97} {
		cases = append(cases, bytes.Repeat([]byte{b}, 1<<20+7))
	}
	eachCounter(t, func(t *testing.T) {
		for _, p := range cases {
			checkNibbleHist(t, rng, seed, p)
		}
	})
}

// checkNibbleHist compares the histogram of p, added in two parts split
// at random, with counting p nibble by nibble.
func checkNibbleHist(t *testing.T, rng *rand.Rand, seed uint64, p []byte) {
	t.Helper()
	var got, want NibbleHist
	cut := rng.IntN(len(p) + 1)
	got.Add(p[:cut])
	got.Add(p[cut:])
	for _, b := range p {
		want[b&15]++
		want[b>>4]++
	}
	if got != want {
		t.Fatalf("seed %d: %d bytes cut at %d, first % x: got %v, want %v",
			seed, len(p), cut, p[:min(len(p), 8)], got, want)
	}
}

func BenchmarkNibbleHist(b *testing.B) {
	p := benchBytes()
	b.SetBytes(int64(len(p)))
	var h NibbleHist
	for b.Loop() {
		h.Add(p)
	}
}

// TestExceedsE4M3 compares ExceedsE4M3, with the vector kernel where there
// is one, with comparing byte by byte, for thresholds that flag all, none
// and some of the blocks.
func TestExceedsE4M3(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 4))
	eachCounter(t, func(t *testing.T) {
		for range 2000 {
			bl := 32 * (1 + rng.IntN(4))
			n := rng.IntN(65)
			p := make([]byte, n*bl)
			top := byte(rng.IntN(128))
			for i := range p {
				p[i] = byte(rng.IntN(int(top)+1)) | byte(rng.IntN(2))<<7
			}
			scales := make([]byte, n)
			for i := range scales {
				scales[i] = byte(rng.IntN(4))
			}
			var thr [256]int8
			for i := range thr {
				switch rng.IntN(4) {
				case 0:
					thr[i] = -1
				case 1:
					thr[i] = 127
				default:
					thr[i] = int8(rng.IntN(128))
				}
			}
			got := ExceedsE4M3(p, bl, scales, &thr)
			var want uint64
			for i, s := range scales {
				for _, b := range p[i*bl : (i+1)*bl] {
					if int(b&0x7f) > int(thr[s]) {
						want |= 1 << i
					}
				}
			}
			if got != want {
				t.Fatalf("seed %d: %d blocks of %d, thresholds %v: got %#x, want %#x",
					seed, n, bl, thr[:4], got, want)
			}
		}
	})
}

// TestE8M0Tally compares Add, with the vector kernel where there is one,
// with counting byte by byte, on random bytes drawn from a few alphabets
// (scales about one centre, with 0 and NaN among them or alone) and on one
// byte set apart from a run of another at every position of a block.
func TestE8M0Tally(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 5))
	alphabets := [][]byte{
		{0, 110, 111, 112, 127, 255},
		{0, 255},
		{1, 254},
		{255},
		{0},
		nil, // every byte
	}
	cases := fromAlphabets(rng, []int{0, 1, 31, 32, 33, 255 * 32, 255*32 + 1, 256 * 32, 20000}, alphabets)
	for i := range 64 {
		for _, pair := range [][2]byte{{255, 7}, {0, 7}, {128, 1}, {128, 254}, {3, 0}, {3, 255}} {
			p := bytes.Repeat([]byte{pair[0]}, 96)
			p[i] = pair[1]
			cases = append(cases, p)
		}
	}
	for _, b := range []byte{0, 255} {
		cases = append(cases, bytes.Repeat([]byte{b}, 1<<20+7))
	}
	eachCounter(t, func(t *testing.T) {
		for _, p := range cases {
			var got, want E8M0Tally
			cut := rng.IntN(len(p) + 1)
			got.Add(p[:cut])
			got.Add(p[cut:])
			want.N = int64(len(p))
			for _, b := range p {
				switch {
				case b == 0:
					want.Zero++
				case b == 255:
					want.NaN++
				case want.Hi == 0:
					want.Lo, want.Hi = b, b
				default:
					want.Lo, want.Hi = min(want.Lo, b), max(want.Hi, b)
				}
			}
			if got != want {
				t.Fatalf("seed %d: %d bytes cut at %d, first % x: got %+v, want %+v",
					seed, len(p), cut, p[:min(len(p), 8)], got, want)
			}
		}
	})
}

func BenchmarkE8M0Tally(b *testing.B) {
	p := benchBytes()
	b.SetBytes(int64(len(p)))
	var t E8M0Tally
	for b.Loop() {
		t.Add(p)
	}
}

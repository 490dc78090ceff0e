package simd

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refE4M3 is the E4M3 byte of 2^k from the value itself: the byte whose
// decode (exponent bias 7, three mantissa bits, subnormals below 2^-6)
// is 2^k, k within [-9, 8].
func refE4M3(k int) byte {
	want := math.Ldexp(1, k)
	for b := range 0x7f {
		e, m := b>>3, b&7
		v := math.Ldexp(float64(m)/8, -6) // subnormal
		if e != 0 {
			v = math.Ldexp(1+float64(m)/8, e-7)
		}
		if v == want {
			return byte(b)
		}
	}
	panic("no E4M3 byte")
}

func TestPow2ScalesE4M3(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 4))
	// Every g a global exponent can take and the bases just past both
	// ends, over every byte at a random phase of the 32-byte groups, and
	// runs of random bytes of every length up to 70.
	for g := -145; g <= 150; g++ {
		n := 256 + rng.IntN(64)
		s := make([]byte, n)
		off := rng.IntN(256)
		for i := range s {
			s[i] = byte(i + off)
		}
		check(t, seed, s, g)
	}
	for n := range 71 {
		s := make([]byte, n)
		for i := range s {
			s[i] = byte(rng.IntN(256))
		}
		check(t, seed, s, rng.IntN(254)-126)
	}
}

// check runs Pow2ScalesE4M3 on s under g against the reference byte by
// byte.
func check(t *testing.T, seed uint64, s []byte, g int) {
	t.Helper()
	dst := make([]byte, 2*len(s))
	got := Pow2ScalesE4M3(dst, s, g)
	clamped := 0
	for i, b := range s {
		want := byte(0x7f)
		if b != 0xff {
			k := int(b) - 127 - g
			if k < -9 || k > 8 {
				clamped++
			}
			want = refE4M3(min(max(k, -9), 8))
		}
		if dst[2*i] != want || dst[2*i+1] != want {
			t.Fatalf("seed %d, g %d, %d bytes: byte %d (%#02x) gave % x, want %#02x twice", seed, g, len(s), i, b, dst[2*i:2*i+2], want)
		}
	}
	if got != clamped {
		t.Fatalf("seed %d, g %d, %d bytes: %d clamped, want %d", seed, g, len(s), got, clamped)
	}
}

func TestPow2ScalesE4M3Fallback(t *testing.T) {
	if !vectorSteps {
		t.Skip("no vector kernels: TestPow2ScalesE4M3 ran the portable loop")
	}
	vectorSteps = false
	defer func() { vectorSteps = true }()
	TestPow2ScalesE4M3(t)
}

func TestPow2ScalesE4M3Panics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a dst of the wrong length did not panic")
		}
	}()
	Pow2ScalesE4M3(make([]byte, 63), make([]byte, 32), 0)
}

func BenchmarkPow2ScalesE4M3(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	s := make([]byte, 1<<16)
	for i := range s {
		s[i] = byte(110 + rng.IntN(30)) // a few clamped at either end
	}
	dst := make([]byte, 2*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		Pow2ScalesE4M3(dst, s, 0)
	}
}

package codecs

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refE4M3 decodes an E4M3 (fn) byte from the format's definition, written
// independently of the package's tables.
func refE4M3(b byte) float64 {
	if b == 0x7f || b == 0xff {
		return math.NaN()
	}
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	exp, man := int(b>>3&15), float64(b&7)
	if exp == 0 {
		return sign * man / 8 * math.Ldexp(1, -6)
	}
	return sign * (1 + man/8) * math.Ldexp(1, exp-7)
}

// newRand returns a generator with a fresh seed, logged so that a failure
// can be replayed.
func newRand(t testing.TB) (*rand.Rand, uint64) {
	seed := uint64(time.Now().UnixNano())
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed
}

func sameBits32(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

func TestE2M1(t *testing.T) {
	want := []float64{0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6}
	for code := range 16 {
		for _, high := range []byte{0x00, 0xa0} { // the high nibble is another element
			got := E2M1ToFloat32(byte(code) | high)
			if float64(got) != want[code] || math.Signbit(float64(got)) != (code >= 8) {
				t.Errorf("E2M1ToFloat32(%#x) = %v, want %v (negative: %v)", byte(code)|high, got, want[code], code >= 8)
			}
		}
	}
}

func TestE4M3EveryByte(t *testing.T) {
	for b := range 256 {
		want := refE4M3(byte(b))
		got32, got64 := E4M3ToFloat32(byte(b)), E4M3ToFloat64(byte(b))
		if math.IsNaN(want) {
			if got32 == got32 || got64 == got64 {
				t.Errorf("byte %#02x: got %v, %v, want NaN", b, got32, got64)
			}
			continue
		}
		if float64(got32) != want || got64 != want || math.Signbit(got64) != math.Signbit(want) {
			t.Errorf("byte %#02x: got %v, %v, want %v", b, got32, got64, want)
		}
	}
	for _, c := range []struct {
		b    byte
		want float64
	}{
		{0x00, 0}, {0x01, math.Ldexp(1, -9)}, {0x07, 7 * math.Ldexp(1, -9)}, {0x08, math.Ldexp(1, -6)},
		{0x38, 1}, {0x3c, 1.5}, {0x7e, 448}, {0xfe, -448}, {0x81, -math.Ldexp(1, -9)},
	} {
		if got := E4M3ToFloat64(c.b); got != c.want {
			t.Errorf("E4M3ToFloat64(%#02x) = %v, want %v", c.b, got, c.want)
		}
	}
	if !math.Signbit(E4M3ToFloat64(0x80)) {
		t.Error("E4M3 0x80 is not negative zero")
	}
}

func TestE4M3Pow2(t *testing.T) {
	for k := -12; k <= 11; k++ {
		kc := min(max(k, -9), 8)
		var want byte
		switch kc {
		case -9:
			want = 0x01
		case -8:
			want = 0x02
		case -7:
			want = 0x04
		default:
			want = byte(kc+7) << 3
		}
		got := E4M3Pow2(k)
		if got != want {
			t.Errorf("E4M3Pow2(%d) = %#02x, want %#02x", k, got, want)
		}
		if v := E4M3ToFloat64(got); v != math.Ldexp(1, kc) {
			t.Errorf("E4M3Pow2(%d) decodes to %v, want 2^%d", k, v, kc)
		}
	}
}

func TestE8M0(t *testing.T) {
	for _, c := range []struct {
		b      byte
		exp    int
		bits32 uint32
	}{
		{0, -127, 0x00400000}, // a float32 subnormal
		{1, -126, 0x00800000},
		{127, 0, 0x3f800000},
		{128, 1, 0x40000000},
		{254, 127, 0x7f000000},
	} {
		exp, ok := E8M0Exponent(c.b)
		if exp != c.exp || !ok {
			t.Errorf("E8M0Exponent(%d) = %d, %v, want %d, true", c.b, exp, ok, c.exp)
		}
		if got := math.Float32bits(E8M0ToFloat32(c.b)); got != c.bits32 {
			t.Errorf("E8M0ToFloat32(%d) bits %#08x, want %#08x", c.b, got, c.bits32)
		}
		if got := E8M0ToFloat64(c.b); got != math.Ldexp(1, c.exp) {
			t.Errorf("E8M0ToFloat64(%d) = %v, want 2^%d", c.b, got, c.exp)
		}
	}
	if _, ok := E8M0Exponent(255); ok {
		t.Error("E8M0Exponent(255) ok")
	}
	if f := E8M0ToFloat32(255); f == f {
		t.Errorf("E8M0ToFloat32(255) = %v, want NaN", f)
	}
	if f := E8M0ToFloat64(255); !math.IsNaN(f) {
		t.Errorf("E8M0ToFloat64(255) = %v, want NaN", f)
	}
	for b := range 255 {
		if float64(E8M0ToFloat32(byte(b))) != E8M0ToFloat64(byte(b)) {
			t.Errorf("E8M0 byte %d: float32 and float64 disagree", b)
		}
	}
}

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // overflows to +Inf
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // signalling NaN made quiet
		{math.Float32frombits(0xffc00000), 0xffc0},
	} {
		if got := Float32ToBF16(c.f); got != c.want {
			t.Errorf("Float32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(c.f), got, c.want)
		}
	}
	for h := range 1 << 16 {
		f := BF16ToFloat32(uint16(h))
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToFloat32(%#04x) bits %#08x", h, math.Float32bits(f))
		}
		if f == f && Float32ToBF16(f) != uint16(h) {
			t.Fatalf("BF16 %#04x does not round-trip", h)
		}
	}
}

func TestF16(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00},
		{65504, 0x7bff},
		{1 + 1.0/2048, 0x3c00}, // tie, even stays
		{1 + 3.0/2048, 0x3c02}, // tie, odd rounds up
		{65520, 0x7c00},        // overflows to +Inf
		{float32(math.Ldexp(1, -24)), 0x0001},
		{float32(math.Ldexp(1, -25)), 0x0000}, // tie with zero, even
	} {
		if got := Float32ToF16(c.f); got != c.want {
			t.Errorf("Float32ToF16(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	for h := range 1 << 16 {
		f := F16ToFloat32(uint16(h))
		if f == f && Float32ToF16(f) != uint16(h) {
			t.Fatalf("F16 %#04x does not round-trip (%v)", h, f)
		}
	}
}

func TestDecodeBF16F16(t *testing.T) {
	rng, seed := newRand(t)
	src := make([]byte, 2*64)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	bf, hf := make([]float32, 64), make([]float32, 64)
	DecodeBF16(bf, src)
	DecodeF16(hf, src)
	for i := range bf {
		h := binary.LittleEndian.Uint16(src[2*i:])
		if !sameBits32(bf[i], BF16ToFloat32(h)) || !sameBits32(hf[i], F16ToFloat32(h)) {
			t.Fatalf("seed %d: element %d (%#04x) decoded to %v, %v", seed, i, h, bf[i], hf[i])
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("DecodeBF16 with an odd source did not panic")
		}
	}()
	DecodeBF16(bf[:1], src[:3])
}

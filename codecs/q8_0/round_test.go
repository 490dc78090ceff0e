package q8_0

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dsfs/dsfs/codecs/internal/ggmlfp16"
)

// quantizeFloat64 is Quantize as it was written first, rounding through
// float64 math.Round and math.Abs: the reference the float32 version must
// equal byte for byte.
func quantizeFloat64(dst []byte, src []float32) {
	for b := 0; b < len(src)/BlockWeights; b++ {
		x := src[b*BlockWeights : (b+1)*BlockWeights]
		y := dst[b*BlockBytes : (b+1)*BlockBytes]
		var amax float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); !(amax > a) {
				amax = a
			}
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(y, ggmlfp16.Bits(d))
		for j, v := range x {
			y[2+j] = byte(int8(float32(math.Round(float64(v * id)))))
		}
	}
}

// edgeFloats are values where rounding or the scale can go wrong: zeros,
// halves and their neighbours, the limits of int32 and of exact float32
// integers, subnormals, infinities and NaNs (quiet, signalling, negative).
func edgeFloats() []float32 {
	var out []float32
	for _, b := range []uint32{0, 1, 0x007fffff, 0x00800000, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7f800001, 0x7fbfffff, 0xffc00000} {
		out = append(out, math.Float32frombits(b))
	}
	for _, v := range []float32{0x1p-30, 0x1p-29, 0x1p-24, 0.5, 1.5, 2.5, 126.5, 127, 127.5, 1 << 22, 1<<23 - 0.5, 1 << 23, 1<<23 + 1, 1 << 24, 1 << 31, 1 << 32} {
		out = append(out, v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1))))
	}
	for _, v := range out {
		out = append(out, -v)
	}
	return out
}

// TestRoundf compares roundf with float32(math.Round(float64(f))), which
// is C's roundf exactly (float32 to float64 and back is exact for the
// integers it gives), on edge values and random bit patterns.
func TestRoundf(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	check := func(f float32) {
		got, want := roundf(f), float32(math.Round(float64(f)))
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("seed %d: roundf(%g = %#08x) = %g, want %g", seed, f, math.Float32bits(f), got, want)
		}
	}
	roundingInputs(rng, check)
}

// roundingInputs calls check on the edge values, then on random bit
// patterns and on random values in the codes' range, where most halves
// fall.
func roundingInputs(rng *rand.Rand, check func(float32)) {
	for _, f := range edgeFloats() {
		check(f)
	}
	for range 1 << 20 {
		check(math.Float32frombits(rng.Uint32()))
		check(float32(rng.IntN(1<<16)-1<<15) / 256)
		check((rng.Float32()*2 - 1) * 128)
	}
}

// TestQuantizeMatchesFloat64 compares Quantize with quantizeFloat64 on
// random blocks: random bits, values of one scale, halves after scaling,
// and edge values mixed in.
func TestQuantizeMatchesFloat64(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	edges := edgeFloats()
	src := make([]float32, 64*BlockWeights)
	got := make([]byte, 64*BlockBytes)
	want := make([]byte, 64*BlockBytes)
	for range 2000 {
		for b := range len(src) / BlockWeights {
			x := src[b*BlockWeights : (b+1)*BlockWeights]
			mode := rng.IntN(4)
			for j := range x {
				switch mode {
				case 0:
					x[j] = math.Float32frombits(rng.Uint32())
				case 1:
					x[j] = float32(rng.NormFloat64())
				case 2:
					x[j] = float32(rng.IntN(254)-127) + 0.5 // halves: d is 1 below
				default:
					x[j] = edges[rng.IntN(len(edges))]
					if rng.IntN(2) == 0 {
						x[j] = float32(rng.NormFloat64()) * 1e-40 // subnormal
					}
				}
			}
			if mode == 2 {
				x[rng.IntN(len(x))] = 127
			}
		}
		Quantize(got, src)
		quantizeFloat64(want, src)
		if !bytes.Equal(got, want) {
			for k := range got {
				if got[k] != want[k] {
					b := k / BlockBytes
					t.Fatalf("seed %d: byte %d (block %d %v): got %#02x, want %#02x", seed, k, b, src[b*BlockWeights:(b+1)*BlockWeights], got[k], want[k])
				}
			}
		}
	}
}

// TestRoundAway compares roundAway with math.Round on float32 values below
// 2^23 in magnitude: edge values and random bit patterns.
func TestRoundAway(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	check := func(f float32) {
		if !(math.Abs(float64(f)) < 1<<23) {
			return
		}
		if got, want := roundAway(f), int32(math.Round(float64(f))); got != want {
			t.Fatalf("seed %d: roundAway(%g = %#08x) = %d, want %d", seed, f, math.Float32bits(f), got, want)
		}
	}
	roundingInputs(rng, check)
}

// BenchmarkQuantize runs Quantize and, in the same run, quantizeFloat64
// (the first version) on normal values; MB/s is of float32 input.
func BenchmarkQuantize(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	dst := make([]byte, len(src)/BlockWeights*BlockBytes)
	for _, c := range []struct {
		name string
		fn   func([]byte, []float32)
	}{{"Quantize", Quantize}, {"float64", quantizeFloat64}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for b.Loop() {
				c.fn(dst, src)
			}
		})
	}
}

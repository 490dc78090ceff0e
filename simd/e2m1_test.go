package simd_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/simd"
)

// TestDecodeE2M1MatchesCodecs decodes random MXFP4 blocks (every scale
// byte, NaN and the subnormal 2^-127 included) with the AVX2 kernel and
// with the portable loop: both equal codecs.DecodeMXFP4 bit for bit.
func TestDecodeE2M1MatchesCodecs(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 5))
	var scaleOf [256]float32
	for b := range scaleOf {
		scaleOf[b] = codecs.E8M0ToFloat32(byte(b))
	}
	saved := *simd.VectorE2M1
	defer func() { *simd.VectorE2M1 = saved }()
	for _, vector := range []bool{false, true} {
		*simd.VectorE2M1 = vector && saved
		for range 50 {
			blocks := rng.IntN(300)
			codes := make([]byte, 16*blocks)
			scales := make([]byte, blocks)
			for i := range codes {
				codes[i] = byte(rng.Uint32())
			}
			for i := range scales {
				scales[i] = byte(rng.Uint32())
			}
			if blocks > 2 {
				scales[0], scales[1] = 0, 255
			}
			want := make([]float32, 32*blocks)
			codecs.DecodeMXFP4(want, codes, scales)
			got := make([]float32, 32*blocks)
			simd.DecodeE2M1(got, codes, scales, &scaleOf)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("seed %d, vector %v: value %d (code byte %#x, scale %#x) is %#x, want %#x",
						seed, *simd.VectorE2M1, i, codes[i/2], scales[i/32], math.Float32bits(got[i]), math.Float32bits(want[i]))
				}
			}
		}
	}
}

func BenchmarkDecodeE2M1(b *testing.B) {
	var scaleOf [256]float32
	for i := range scaleOf {
		scaleOf[i] = codecs.E8M0ToFloat32(byte(i))
	}
	const blocks = 1 << 11 // 256 KiB of output: in L2, as MatMulTDecoded keeps it
	codes, scales, dst := make([]byte, 16*blocks), make([]byte, blocks), make([]float32, 32*blocks)
	for i := range codes {
		codes[i] = byte(i * 7)
	}
	for i := range scales {
		scales[i] = byte(120 + i%8)
	}
	b.Run("simd", func(b *testing.B) {
		b.SetBytes(int64(len(codes)))
		for b.Loop() {
			simd.DecodeE2M1(dst, codes, scales, &scaleOf)
		}
	})
	b.Run("codecs", func(b *testing.B) {
		b.SetBytes(int64(len(codes)))
		for b.Loop() {
			codecs.DecodeMXFP4(dst, codes, scales)
		}
	})
}

// TestDecodeScaledMatchesLoop decodes random E4M3 rows with random block
// scales (powers of two and not; partial last blocks) against the
// per-element loop codecs.E4M3ToFloat32(b) · scale[i/block]: bit for bit.
func TestDecodeScaledMatchesLoop(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 6))
	var values [256]float32
	for b := range values {
		values[b] = codecs.E4M3ToFloat32(byte(b))
	}
	for range 100 {
		n, block := rng.IntN(1000), 1+rng.IntN(200)
		codes := make([]byte, n)
		for i := range codes {
			codes[i] = byte(rng.Uint32())
		}
		scales := make([]float32, (n+block-1)/block)
		for i := range scales {
			scales[i] = float32(rng.NormFloat64())
		}
		got := make([]float32, n)
		simd.DecodeScaled(got, codes, &values, scales, block)
		for i, c := range codes {
			if want := codecs.E4M3ToFloat32(c) * scales[i/block]; math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("seed %d: value %d (code %#x, block %d) is %g, want %g", seed, i, c, block, got[i], want)
			}
		}
	}
}

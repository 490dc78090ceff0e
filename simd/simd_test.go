package simd

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestMaxLow7(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	var b [Block]byte
	check := func() {
		t.Helper()
		var want byte
		for _, x := range b {
			want = max(want, x&0x7f)
		}
		if got := MaxLow7(&b); got != want {
			t.Fatalf("seed %d: MaxLow7(% x) = %#02x, want %#02x", seed, b, got, want)
		}
	}
	// Every maximum at every position, over a floor of smaller bytes with
	// random high bits, which must not count.
	for top := range 128 {
		for pos := range Block {
			for i := range b {
				b[i] = byte(rng.IntN(top+1)) | byte(rng.IntN(2))<<7
			}
			b[pos] = byte(top) | byte(rng.IntN(2))<<7
			check()
		}
	}
	for range 10000 {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		check()
	}
}

func TestPackNibbles(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	var lut [256]byte
	var src [Block]byte
	var dst [Block / 2]byte
	for range 1000 {
		for i := range lut {
			lut[i] = byte(rng.IntN(16))
		}
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		PackNibbles(&dst, &src, &lut)
		for i := range Block {
			got := dst[i/2] >> (4 * (i % 2)) & 15
			if got != lut[src[i]] {
				t.Fatalf("seed %d: element %d: code %d, want %d", seed, i, got, lut[src[i]])
			}
		}
	}
}

func BenchmarkMaxLow7(b *testing.B) {
	blocks := make([][Block]byte, 1<<12)
	for i := range blocks {
		for j := range blocks[i] {
			blocks[i][j] = byte(i * j)
		}
	}
	b.SetBytes(int64(len(blocks) * Block))
	for b.Loop() {
		for i := range blocks {
			MaxLow7(&blocks[i])
		}
	}
}

func BenchmarkPackNibbles(b *testing.B) {
	blocks := make([][Block]byte, 1<<12)
	for i := range blocks {
		for j := range blocks[i] {
			blocks[i][j] = byte(i * j)
		}
	}
	var lut [256]byte
	for i := range lut {
		lut[i] = byte(i) & 15
	}
	dst := make([][Block / 2]byte, len(blocks))
	b.SetBytes(int64(len(blocks) * Block))
	for b.Loop() {
		for i := range blocks {
			PackNibbles(&dst[i], &blocks[i], &lut)
		}
	}
}

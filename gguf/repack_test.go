package gguf

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRepackMXFP4BlocksRandom compares the in-place word-at-a-time repack
// with the converter's rule written per value, on random codes and scales.
func TestRepackMXFP4BlocksRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 200 {
		n := 1 + rng.IntN(300)
		codes := make([]byte, 16*n)
		scales := make([]byte, n)
		for i := range codes {
			codes[i] = byte(rng.Uint32())
		}
		for i := range scales {
			scales[i] = byte(rng.Uint32())
		}
		// Value k of block b: source byte 16b + k/2, low nibble when k
		// is even; it goes to byte 1 + k%16, low nibble when k < 16.
		want := make([]byte, 17*n)
		for b := range n {
			want[17*b] = scales[b]
			for k := range 32 {
				v := codes[16*b+k/2] >> (4 * (k % 2)) & 0x0f
				want[17*b+1+k%16] |= v << (4 * (k / 16))
			}
		}
		got := make([]byte, 17*n)
		copy(got[n:], codes)
		repackMXFP4Blocks(got, scales)
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("seed %d, %d blocks: byte %d (block %d): got %#02x, want %#02x", seed, n, i, i/17, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkRepackMXFP4Blocks is the repack alone, in place on 1 MiB of
// blocks already in memory; MB/s is of output.
func BenchmarkRepackMXFP4Blocks(b *testing.B) {
	n := 1 << 20 / 17
	codes := make([]byte, 16*n)
	scales := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range codes {
		codes[i] = byte(rng.Uint32())
	}
	dst := make([]byte, 17*n)
	b.SetBytes(int64(len(dst)))
	for b.Loop() {
		copy(dst[n:], codes)
		repackMXFP4Blocks(dst, scales)
	}
}

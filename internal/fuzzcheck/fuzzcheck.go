// Package fuzzcheck holds what fuzz targets share: the parsers' bound on
// allocation, and the codecs' reading of arbitrary bytes as float32s.
package fuzzcheck

import (
	"encoding/binary"
	"math"
	"runtime"
	"testing"
)

// Allocated is the process's total allocation so far, for Bounded.
func Allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// Bounded fails t if more was allocated since before than a JSON decode of
// n input bytes can explain: a hostile length in the input must never
// drive an allocation.
func Bounded(t *testing.T, before uint64, n int) {
	t.Helper()
	if got, limit := Allocated()-before, uint64(64*n+1<<20); got > limit {
		t.Fatalf("allocated %d bytes reading %d input bytes (limit %d)", got, n, limit)
	}
}

// Float32s reads data as little-endian float32 bits, NaN and infinities
// included, padded with zeros to a multiple of block values.
func Float32s(data []byte, block int) []float32 {
	x := make([]float32, (len(data)/4+block-1)/block*block)
	for i := range len(data) / 4 {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return x
}

// Float32Seed is a fuzz seed for Float32s: n values cycling through the
// integers -3 to 3.
func Float32Seed(n int) []byte {
	seed := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(float32(i%7)-3))
	}
	return seed
}

// Package fuzzcheck holds the checks the parsers' fuzz targets share.
package fuzzcheck

import (
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

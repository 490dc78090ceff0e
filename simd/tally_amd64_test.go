package simd

import "testing"

// eachCounter runs f with each counting kernel this machine has: AVX-512,
// AVX2, and the portable Go code.
func eachCounter(t *testing.T, f func(t *testing.T)) {
	saved2, saved512 := useAVX2, useAVX512
	defer func() { useAVX2, useAVX512 = saved2, saved512 }()
	if saved512 {
		t.Run("avx512", f)
	}
	useAVX512 = false
	if saved2 {
		t.Run("avx2", f)
	}
	useAVX2 = false
	t.Run("generic", f)
}

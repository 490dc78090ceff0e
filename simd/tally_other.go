//go:build !amd64

package simd

// addVector counts nothing: this architecture has no vector kernel.
func (t *E4M3Tally) addVector(p []byte) []byte { return p }

// addVector counts nothing: this architecture has no vector kernel.
func (h *NibbleHist) addVector(p []byte) []byte { return p }

// exceedsVector has no kernel to run on this architecture.
func exceedsVector(p []byte, bl int, scales []byte, thr *[256]int8) (uint64, bool) {
	return 0, false
}

// addVector counts nothing: this architecture has no vector kernel.
func (t *E8M0Tally) addVector(p []byte) []byte { return p }

//go:build !amd64

package simd

func decodeE2M1Vector(dst []float32, codes, scales []byte, scaleOf *[256]float32) int { return 0 }

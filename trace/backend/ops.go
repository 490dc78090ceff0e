package backend

// V4Ops are DeepSeek-V4's own operations that a Backend may run where
// its buffers are (the cuda backend does); on a backend without them the
// forward runs them on the host. Each works in place or into out as the
// host function does (simd.QuantE4M3 and QuantE2M1, simd.Hadamard,
// sparseAttention).
type V4Ops interface {
	// ActQuant fake-quantises each row of x per block of block values:
	// to FP8 E4M3, or FP4 E2M1 when fp4, with power-of-two scales.
	ActQuant(x Mat, block int, fp4 bool)
	// Hadamard applies the Walsh-Hadamard transform to each row of x
	// (a power-of-two width) and multiplies by scale.
	Hadamard(x Mat, scale float32)
	// SparseAttention is kernel.py's sparse_attn with the per-head sink:
	// out and q [T·heads, d], kv [rows, d] (K = V), sink [heads], idx
	// [T, k] rows of kv (-1 = none).
	SparseAttention(out, q, kv Mat, sink Buffer, idx []int32, k, heads int, scale float32)
}

// V41Ops are the V4.1 operations a backend may run besides V4Ops; without them the forward runs them on the host.
type V41Ops interface {
	// FP4QuantE4M3 is V4.1's fp4_act_quant of the compressed KV, in place
	// per block of block values of each row: E2M1 values with one E4M3
	// scale a block (the host function FP4QuantE4M3).
	FP4QuantE4M3(x Mat, block int)
}

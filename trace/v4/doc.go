// Package v4 runs the decoder layers of DeepSeek-V4 checkpoints (V4-Flash
// and V4-Pro, DeepSeek's flat layout) one at a time, as DeepSeek's
// reference inference code (deepseek-ai/DeepSeek-V4-Flash
// inference/model.py and kernel.py at commit 60d8d70) does in prefill:
//
//   - hc_mult parallel residual streams mixed by Sinkhorn-normalised
//     hyper-connections (mHC), in kernel.py's operation order;
//   - attention with a LoRA query and a per-head unweighted query norm,
//     one shared K = V head, interleaved RoPE on its last dims (plain θ on
//     sliding-window layers, compress_rope_theta with YaRN on compressed
//     ones), a sliding window, and per layer kind: nothing more (SWA),
//     every visible entry of a gated-pooling compressor (HCA), or the
//     entries a lightning indexer picks from an overlapping ratio-4
//     compressor (CSA); sparse attention with a per-head sink, inverse
//     RoPE, and the grouped output projection wo_a then wo_b;
//   - mixture-of-experts with sqrt-softplus (or sigmoid, softmax) scores,
//     the bias for selection only, hash routing through tid2eid (I32 or
//     I64) on the first layers, MXFP4 routed experts and a shared expert,
//     both with the clamped SwiGLU;
//   - the hc head, final norm and head for logits at every position.
//
// Two precisions: A8 is what the reference computes on a real FP8/FP4
// checkpoint (the input of every FP8/FP4 linear quantised to FP8 per
// block of 128 with power-of-two scales); FP32 multiplies unquantised
// activations by the dequantised weights. Both keep the model's own
// fake-quant sites (window and compressed KV to FP8, indexer queries and
// keys to FP4 after a Hadamard rotation). Top-k choices (indexer, router)
// break exact ties towards the lower index.
//
// DeepSeek-V4.1-Flash (inference/model.py and engram.py at Hugging Face
// revision dba1be0a) runs through Open41 and Model41.Forward: CSA2 roles
// derived from the config (full, reindex, reuse, candidate source) with
// the shared compressed KV, index keys, picks and candidate mask carried
// in State41 from layer to layer, single-pass mHC with the carried
// pre_mix, FP4 compressed KV with E4M3 scales per 16, FP8 window KV over
// whole 32-blocks, Engram n-gram memory (token map, primes and numpy's
// multipliers computed as engram.py does, table rows read on demand), and
// the router with gate_temp and norm_topk_prob. A8 quantises activations
// per block of 32 there.
//
// Arithmetic is float32 on the host: the matrix products run on simd's
// kernels, the rest in plain Go. Model.SetBackend and Model41.SetBackend
// move the products, and the operations a backend offers as backend.V4Ops
// and backend.V41Ops, to a backend.Backend (the cuda one).
package v4

// Package trace records what DeepSeek decoder layers do with a handful of
// prompts, as the seed script trace_v2_lite.py did on a GPU: it runs the
// layers of a checkpoint one at a time (package model), memoises the
// residual stream between them, and describes each layer's MLA states and
// MoE routes in the seed's JSON records: hidden-state statistics, latent
// and rotary-key magnitudes, cache arithmetic, expert load with its gini,
// entropy, effective experts and spread, per-token routes with decoded
// pieces, and prompt-pair Jaccard overlaps. The raw float32 activations of
// each layer are exposed as tensors of known shape (Activations), so that a
// view can lay them out as safetensors files before anything runs.
// DeepSeek-V4 checkpoints run through V4Tracer (package v4) with the same
// documents plus V4's facts: hyper-connection coefficients, window and
// compressed keys attended, indexer picks, hash-routed layers, logits.
package trace

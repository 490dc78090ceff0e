// Package deepseek2 runs the decoder layers of DeepSeek-V2, V2-Lite, V3 and R1
// checkpoints one at a time, as DeepSeek's reference inference code
// (deepseek-ai/DeepSeek-V3 inference/model.py) does: multi-head latent
// attention (MLA) with YaRN rotary embeddings in its absorbed form, dense
// first layers, and mixture-of-experts layers with softmax or sigmoid
// routing, group-limited top-k, the F32 correction bias, routed scaling
// and shared experts.
//
// Open checks a catalogued checkpoint from its headers; Forward runs one
// layer on a batch of sequences. Weights are read from the shards when a
// layer runs, one matrix at a time (routed experts only when a token
// selected them), and never a whole layer at once. BF16, F16, F32 and FP8
// E4M3 weights with block scales (F32 weight_scale_inv, 128×128, or E8M0)
// are decoded; Hugging Face names and the flat names of DeepSeek's
// inference code are both read.
//
// Arithmetic is float32 throughout. Where Hugging Face's modeling code and
// model.py differ, the package follows config.json and the HF file of its
// model type, with model.py's masking of dropped expert groups (-inf) and
// its interleaved rotary layout for the recorded k_pe (see
// testdata/README.md at the repository root).
//
// The operations run on a Backend, an interface shaped for device memory:
// trace/backend's CPU, or a GPU backend (package cuda).
package deepseek2

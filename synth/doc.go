// Package synth writes deterministic synthetic DeepSeek checkpoints:
// safetensors shards in the official flat naming with their index,
// config.json, inference/config.json and tokenizer_config.json, for tests,
// demos and benchmarks of everything that reads a checkpoint.
//
// Write writes a named preset (Presets lists them). v41-full-sparse and
// v4-full-sparse are DeepSeek-V4.1-Flash and DeepSeek-V4-Flash as
// released: every tensor name, dtype and shape, the shard assignment, the
// headers as the reference serializer writes them (no __metadata__), the
// index and both config files (the layouts and their sources:
// LAYOUTS.md); v41-tiny and v4-tiny hold every pattern of those at small
// sizes. WriteSpec writes any Spec, so a test can start from
// TinySpec and change a size. WriteShard writes one hand-made shard from
// raw tensors, and PatchTensor edits one tensor of a written checkpoint in
// place (a NaN scale, an Inf), for bad-input tests.
//
// Values look like the real ones: MXFP4 experts with bell-shaped E2M1
// codes (negative zeros included), E8M0 block scales spread over about ten
// octaves with rare outlier blocks six octaves up and some all-zero blocks
// (half of them with scale byte 0); FP8 E4M3 weights with 32x32 E8M0
// scales near 2^-6 and never a NaN byte; Engram tables of E4M3 ~N(0, 1)
// with per-row scales a few octaves apart; BF16 embeddings ~N(0, 0.02),
// norms near 1, small F32 router biases. The scales of an expert's w1 and
// w3 stay within 18 octaves (apart from zero blocks), so an NVFP4
// transcode is lossless on these presets.
//
// The bytes depend only on the spec: each tensor is cut into chunks of
// about 1 MiB of rows whose PRNG is seeded from the spec's Seed, the
// tensor's name and the chunk's index, so the chunks are generated in
// parallel, in any order, by any number of workers, with the same result.
// Values come from 64K-entry tables built with integer arithmetic, the same
// on every platform.
package synth

// Package codecs holds the byte-level transforms of dsfs: element formats
// (E2M1, E4M3, E8M0, BF16, FP16), the lossless MXFP4 -> NVFP4 scale
// transcode and the FP8 -> FP4 Engram row codec. Every function is pure and
// allocation-free: the caller passes the destination, and a run of whole rows
// in gives the same rows out, so a view can compute any block of rows on its
// own. The rules are those of FORMATS.md.
package codecs

// Version is the codec version written into view headers ("dsfs.codec") and
// cache keys. Any change to a byte this package produces (a rounding rule, a
// clamp, the choice of a global exponent, a table entry) must bump it, or
// caches would serve bytes made under the old rule.
//
// 2: nvfp4/'s weight_scale_2 scalars moved after every other tensor of a
// shard, so that opening a shard no longer computes every global scale.
// 3: nvfp4/ is the loader contract of NVIDIA's NVFP4 builds: an
// input_scale scalar per expert matrix (after the others, with the
// weight_scale_2 scalars), MTP experts left MXFP4 unless asked, and the
// MIXED_PRECISION quantisation configs.
const Version = "3"

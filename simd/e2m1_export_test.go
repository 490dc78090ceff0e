package simd

// VectorE2M1 lets the external tests run DecodeE2M1's portable loop.
var VectorE2M1 = &vectorE2M1

// Package iq2xxs quantises float32 weights to ggml's IQ2_XXS blocks and
// decodes them back.
//
// The port matches ggml commit d99724f2b141fed9e1a9f402213506c081433465
// (llama.cpp d3cf1f14) bit for bit: quantize_row_iq2_xxs_impl with an
// importance vector, as run by ggml_quantize_chunk, and
// dequantize_row_iq2_xxs, built for generic x86-64 without fused
// multiply-add. Every float32 operation ggml rounds is rounded here too: the
// products that feed additions are wrapped in explicit float32 conversions,
// which the Go specification forbids the compiler to fuse across.
//
// On amd64 with AVX2 the search runs on the vector unit, chosen at run time
// (golang.org/x/sys/cpu): each trial scale's rounding and neighbour search
// eight candidates at a time, the thirteen trials' sums and make_qp_quants'
// eight trial errors side by side in lanes, and the weights' square roots.
// Every lane runs ggml's operations in ggml's order and precision, separate
// multiplies and adds, so the bytes are those of the portable Go path, which
// other CPUs run and the tests compare against it.
//
// A block holds 256 weights in 66 bytes: the fp16 super-scale d, then eight
// 32-weight sub-blocks of two little-endian uint32 words each, the first
// holding four codebook indices, the second four 7-bit sign groups and a
// 4-bit sub-block scale in bits 28..31.
package iq2xxs

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dsfs/dsfs/codecs/internal/ggmlfp16"
)

const (
	// BlockWeights is the number of weights in one block.
	BlockWeights = 256
	// BlockBytes is the encoded size of one block.
	BlockBytes = 66
)

// RowBytes returns the encoded size of n weights. It panics unless n is a
// non-negative multiple of BlockWeights.
func RowBytes(n int) int {
	if n < 0 || n%BlockWeights != 0 {
		panic(fmt.Sprintf("iq2xxs: %d weights is not a whole number of %d-weight blocks", n, BlockWeights))
	}
	return n / BlockWeights * BlockBytes
}

// Quantize encodes src into dst, which must be exactly RowBytes(len(src))
// long.
//
// src is a sequence of rows of len(importance) weights each, and weight i of
// a row is weighed by importance[i], as ggml_quantize_chunk does with an
// imatrix; len(importance) must be a multiple of BlockWeights dividing
// len(src). A nil importance is shorthand for a vector of ones (the
// "constant unit importance" recipe), with which rows make no difference;
// ggml itself has no IQ2_XXS mode without an importance vector.
//
// Quantize does not allocate and is safe for concurrent use; the first call
// builds the codebook search tables (tens of milliseconds). Lengths that do
// not fit panic; values never do, as long as they are finite. As in ggml, magnitudes beyond about 2e6 overflow the fp16
// super-scale to infinity. Where ggml aborts instead (magnitudes whose
// squares overflow float32 leave no codebook point at a finite distance),
// Quantize takes the first candidate point and carries on.
func Quantize(dst []byte, src, importance []float32) {
	if len(dst) != RowBytes(len(src)) {
		panic(fmt.Sprintf("iq2xxs: Quantize of %d weights into %d bytes, want %d", len(src), len(dst), RowBytes(len(src))))
	}
	if importance != nil {
		if len(importance) == 0 || len(importance)%BlockWeights != 0 || len(src)%len(importance) != 0 {
			panic(fmt.Sprintf("iq2xxs: importance of length %d does not fit rows of %d weights", len(importance), len(src)))
		}
	}
	quantize(dst, src, importance, true)
}

// quantize is Quantize with the vector neighbour search on or off.
func quantize(dst []byte, src, importance []float32, vector bool) {
	t := tables()
	for b := 0; b < len(src)/BlockWeights; b++ {
		x := (*[BlockWeights]float32)(src[b*BlockWeights:])
		var qw *[BlockWeights]float32
		if importance != nil {
			qw = (*[BlockWeights]float32)(importance[b*BlockWeights%len(importance):])
		}
		quantizeBlock((*[BlockBytes]byte)(dst[b*BlockBytes:]), x, qw, t, vector)
	}
}

// Dequantize decodes the blocks in src into dst, which must hold exactly
// BlockWeights weights per BlockBytes bytes of src.
func Dequantize(dst []float32, src []byte) {
	if len(src)%BlockBytes != 0 || len(dst) != len(src)/BlockBytes*BlockWeights {
		panic(fmt.Sprintf("iq2xxs: Dequantize of %d bytes into %d weights", len(src), len(dst)))
	}
	for b := 0; b < len(src)/BlockBytes; b++ {
		dequantizeBlock((*[BlockWeights]float32)(dst[b*BlockWeights:]), (*[BlockBytes]byte)(src[b*BlockBytes:]))
	}
}

// gridFloats holds each grid point's decoded magnitudes as float32, the
// conversion ggml's dequantizer makes for every weight.
var gridFloats = func() (g [256][8]float32) {
	for k, w := range gridWords {
		for j := range 8 {
			g[k][j] = float32(uint8(w >> (8 * j)))
		}
	}
	return g
}()

func dequantizeBlock(y *[BlockWeights]float32, b *[BlockBytes]byte) {
	d := ggmlfp16.Float32(binary.LittleEndian.Uint16(b[0:]))
	for ib := range 8 {
		w0 := binary.LittleEndian.Uint32(b[2+8*ib:])
		w1 := binary.LittleEndian.Uint32(b[6+8*ib:])
		db := d * (0.5 + float32(w1>>28)) * 0.25
		for k := range 4 {
			grid := &gridFloats[uint8(w0>>(8*k))]
			signs := signBytes[w1>>(7*k)&127]
			out := (*[8]float32)(y[32*ib+8*k:])
			for j := range 8 {
				// ggml multiplies by -1 rather than negating; the two
				// differ only in the sign of a NaN.
				s := float32(1)
				if signs&(1<<j) != 0 {
					s = -1
				}
				out[j] = db * grid[j] * s
			}
		}
	}
}

// nearestInt is ggml's nearest_int: round half to even for |f| <= 2^22 via
// the float32 bits of f + 1.5*2^23, and whatever that trick gives (with no
// trap) for larger, infinite or NaN f.
func nearestInt(f float32) int32 {
	// The conversion keeps an inlined caller's product f = a*b from fusing
	// with the addition.
	v := float32(f) + 12582912
	return int32(math.Float32bits(v)&0x7fffff) - 0x400000
}

// sqrt32 is sqrtf: float64's square root is exact enough that rounding it to
// float32 gives the correctly rounded float32 root.
func sqrt32(f float32) float32 {
	return float32(math.Sqrt(float64(f)))
}

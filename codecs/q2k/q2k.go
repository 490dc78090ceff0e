// Package q2k is a Go port of ggml's Q2_K quantiser and dequantiser,
// bit-identical to ggml-org/ggml commit d99724f2b141fed9e1a9f402213506c081433465
// (llama.cpp d3cf1f14) built for generic x86-64, that is without fused
// multiply-add.
//
// Q2_K stores 256 weights in an 84-byte block: sixteen 16-weight sub-blocks,
// each with a 4-bit scale code and a 4-bit min code relative to two fp16
// super-scales, and 2-bit levels; a weight decodes as d*sc*q - dmin*m.
//
// There are two quantisers, as in ggml. [QuantizeRef] is
// quantize_row_q2_K_ref, the path ggml takes without an importance matrix.
// quantizeImportance (unexported until a q2/ recipe uses an importance
// matrix) is quantize_row_q2_K_impl, a different search
// weighted by an importance vector. Both reproduce ggml's bytes exactly,
// which rules out any reassociation of float32 arithmetic: every sum runs in
// ggml's order and every product is rounded before it is added, because Go
// may otherwise fuse x*y+z into one FMA (it does on arm64 and GOAMD64=v3).
//
// On amd64 with AVX2, QuantizeRef fits eight sub-blocks side by side, one
// per vector lane, each lane running make_qkx2_quants' operations in its
// order and precision with branches as per-lane masks, and requantises on
// the vector unit; the bytes are those of the portable Go path, which other
// CPUs run and the tests compare against it.
//
// quantizeImportance follows make_qkx3_quants as of d99724f2; the guard
// against out-of-range levels that later llama.cpp commits added to it
// changes none of the reference vectors.
//
// Row geometry: a row of n weights (n a multiple of 256) takes RowBytes(n)
// bytes, the blocks in order along the row.
package q2k

import (
	"fmt"
	"math"

	"github.com/dsfs/dsfs/codecs/internal/ggmlfp16"
)

const (
	// BlockWeights is the number of weights in one Q2_K block (ggml's QK_K).
	BlockWeights = 256
	// BlockBytes is the encoded size of one block: scales[16] | qs[64] |
	// d fp16 | dmin fp16, little-endian.
	BlockBytes = 84

	subBlocks = BlockWeights / 16
	offQS     = 16
	offD      = 80
	offDmin   = 82
)

// RowBytes returns the encoded size of a row of n weights. It panics if n is
// negative or not a multiple of BlockWeights.
func RowBytes(n int) int {
	if n < 0 || n%BlockWeights != 0 {
		panic(fmt.Sprintf("q2k: row of %d weights is not a whole number of %d-weight blocks", n, BlockWeights))
	}
	return n / BlockWeights * BlockBytes
}

// QuantizeRef encodes src into dst as ggml's quantize_row_q2_K_ref does
// (ggml_quantize_chunk with no importance matrix). Blocks are independent, so
// src may hold any number of rows. It panics if len(src) is not a multiple of
// BlockWeights or dst is shorter than RowBytes(len(src)).
func QuantizeRef(dst []byte, src []float32) {
	checkQuantize(dst, src)
	quantizeRef(dst, src, true)
}

// quantizeRef is QuantizeRef with the vector fit (where the CPU has one) on
// or off; the bytes are the same.
func quantizeRef(dst []byte, src []float32, vector bool) {
	for len(src) > 0 {
		quantizeRefBlock((*[BlockBytes]byte)(dst), (*[BlockWeights]float32)(src), vector)
		dst, src = dst[BlockBytes:], src[BlockWeights:]
	}
}

// quantizeImportance encodes src into dst as ggml's quantize_row_q2_K_impl
// does (ggml_quantize_chunk with an importance matrix). importance holds one
// entry per column, so its length is the row length; src holds whole rows of
// that length, and weight i of every row is weighted by importance[i]. It
// panics if len(importance) is not a positive multiple of BlockWeights, if
// len(src) is not a multiple of len(importance), or if dst is shorter than
// RowBytes(len(src)).
func quantizeImportance(dst []byte, src, importance []float32) {
	n := len(importance)
	if n == 0 || n%BlockWeights != 0 || len(src)%n != 0 {
		panic(fmt.Sprintf("q2k: %d weights do not form rows of %d (importance length, a multiple of %d)", len(src), n, BlockWeights))
	}
	checkQuantize(dst, src)
	for len(src) > 0 {
		qw := importance
		for len(qw) > 0 {
			quantizeImportanceBlock((*[BlockBytes]byte)(dst), (*[BlockWeights]float32)(src), (*[BlockWeights]float32)(qw))
			dst, src, qw = dst[BlockBytes:], src[BlockWeights:], qw[BlockWeights:]
		}
	}
}

// Dequantize decodes src into dst as ggml's dequantize_row_q2_K does. It
// panics if len(src) is not a multiple of BlockBytes or dst is shorter than
// the weights src encodes.
func Dequantize(dst []float32, src []byte) {
	if len(src)%BlockBytes != 0 {
		panic(fmt.Sprintf("q2k: %d bytes are not a whole number of %d-byte blocks", len(src), BlockBytes))
	}
	if n := len(src) / BlockBytes * BlockWeights; len(dst) < n {
		panic(fmt.Sprintf("q2k: destination holds %d weights, need %d", len(dst), n))
	}
	for len(src) > 0 {
		dequantizeBlock((*[BlockWeights]float32)(dst), (*[BlockBytes]byte)(src))
		dst, src = dst[BlockWeights:], src[BlockBytes:]
	}
}

func checkQuantize(dst []byte, src []float32) {
	if n := RowBytes(len(src)); len(dst) < n {
		panic(fmt.Sprintf("q2k: destination holds %d bytes, need %d", len(dst), n))
	}
}

// levels converts a 2-bit level to float32 without an int conversion.
var levels = [4]float32{0, 1, 2, 3}

// nearestInt is ggml's nearest_int: round half to even through the float32
// adder for |f| <= 2^22. Larger, infinite and NaN arguments reach it (ggml's
// assert is compiled out) and give the bit trick's wrapped value, which is
// what the reference vectors record; math.Round would not.
func nearestInt(f float32) int32 {
	// The conversion keeps an inlined caller's product from being fused
	// into the addition.
	return int32(math.Float32bits(float32(f)+12582912)&0x007FFFFF) - 0x00400000
}

// level is ggml's MAX(0, MIN(3, nearest_int(v))). Written with if
// statements the clamp compiles to conditional moves; the levels of noisy
// data are too random for branches.
func level(v float32) uint32 {
	l := nearestInt(v)
	if l < 0 {
		l = 0
	}
	if l > 3 {
		l = 3
	}
	return uint32(l)
}

// levelCodes packs level(s*v[i]), the product rounded to float32, into bits
// 2i..2i+1. It is unrolled because the compiler keeps branches for the
// clamp inside a loop.
func levelCodes(s float32, v *[16]float32) uint32 {
	return level(float32(s*v[0])) | level(float32(s*v[1]))<<2 |
		level(float32(s*v[2]))<<4 | level(float32(s*v[3]))<<6 |
		level(float32(s*v[4]))<<8 | level(float32(s*v[5]))<<10 |
		level(float32(s*v[6]))<<12 | level(float32(s*v[7]))<<14 |
		level(float32(s*v[8]))<<16 | level(float32(s*v[9]))<<18 |
		level(float32(s*v[10]))<<20 | level(float32(s*v[11]))<<22 |
		level(float32(s*v[12]))<<24 | level(float32(s*v[13]))<<26 |
		level(float32(s*v[14]))<<28 | level(float32(s*v[15]))<<30
}

func abs32(f float32) float32 {
	return math.Float32frombits(math.Float32bits(f) &^ (1 << 31))
}

// quantizeRefBlock is one block of quantize_row_q2_K_ref, with the
// sub-blocks' fits side by side on the vector unit if vector is set and the
// CPU has one.
func quantizeRefBlock(b *[BlockBytes]byte, x *[BlockWeights]float32, vector bool) {
	var (
		codes            [subBlocks]uint32 // 2-bit levels, weight i of sub-block j in bits 2i..2i+1 of codes[j]
		scales, mins     [subBlocks]float32
		w                [16]float32
		maxScale, maxMin float32
	)
	if vector && haveVectorFit {
		fitRefVector(x, &scales, &mins, &codes)
	} else {
		for j := range subBlocks {
			xs := (*[16]float32)(x[16*j:])
			for i, v := range xs {
				w[i] = abs32(v)
			}
			scales[j], mins[j], codes[j] = fitRange(xs, &w, refSteps, true)
		}
	}
	for j := range subBlocks {
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}

	// The nibbles come from the unrounded maxima, the re-quantisation below
	// from the fp16-rounded super-scales, as in ggml.
	sc := (*[subBlocks]byte)(b[:])
	var d, dmin uint16
	if maxScale > 0 {
		iscale := 15 / maxScale
		for j := range sc {
			sc[j] = byte(nearestInt(float32(iscale * scales[j])))
		}
		d = ggmlfp16.Bits(maxScale / 15)
	} else {
		*sc = [subBlocks]byte{}
	}
	if maxMin > 0 {
		iscale := 15 / maxMin
		for j := range sc {
			sc[j] |= byte(nearestInt(float32(iscale*mins[j])) << 4)
		}
		dmin = ggmlfp16.Bits(maxMin / 15)
	}
	if vector && haveVectorFit {
		requantizeVector(x, sc, ggmlfp16.Float32(d), ggmlfp16.Float32(dmin), &codes)
	} else {
		requantize(x, sc, ggmlfp16.Float32(d), ggmlfp16.Float32(dmin), &codes)
	}
	pack(b, &codes, d, dmin)
}

// requantizeVector is requantize with the divisions and levels on the
// vector unit.
func requantizeVector(x *[BlockWeights]float32, sc *[subBlocks]byte, d, dmin float32, codes *[subBlocks]uint32) {
	var dd, dm [subBlocks]float32
	var fresh [subBlocks]uint32
	for j, s := range sc {
		dd[j] = d * float32(s&0xF)
		dm[j] = float32(dmin * float32(s>>4))
	}
	requantizeAVX2(x, &dm, &dd, &fresh)
	for j := range codes {
		if dd[j] != 0 {
			codes[j] = fresh[j]
		}
	}
}

// fitRefVector is the reference path's sixteen fits, eight at a time with
// fitRangeMADAVX2.
func fitRefVector(x *[BlockWeights]float32, scales, mins *[subBlocks]float32, codes *[subBlocks]uint32) {
	var xt, wt, lt [16][8]float32
	for half := range 2 {
		for j := range 8 {
			xs := (*[16]float32)(x[16*(8*half+j):])
			for i, v := range xs {
				xt[i][j], wt[i][j] = v, abs32(v)
			}
		}
		fitRangeMADAVX2(&xt, &wt, &refSteps[0], len(refSteps), (*[8]float32)(scales[8*half:]), (*[8]float32)(mins[8*half:]), &lt)
		for j := range 8 {
			var c uint32
			for i := range 16 {
				c |= uint32(lt[i][j]) << (2 * i)
			}
			codes[8*half+j] = c
		}
	}
}

// quantizeImportanceBlock is one block of quantize_row_q2_K_impl.
func quantizeImportanceBlock(b *[BlockBytes]byte, x, qw *[BlockWeights]float32) {
	var (
		codes        [subBlocks]uint32
		scales, mins [subBlocks]float32
		sw           [subBlocks]float32
		w            [16]float32
		ls, lm       [subBlocks]uint8
	)
	var sumx2 float32
	for _, v := range x {
		sumx2 += float32(v * v)
	}
	// The compiler turns the division into an exact multiplication by 2^-8;
	// the conversion keeps it from fusing that into the addition below.
	sigma2 := float32(sumx2 / BlockWeights)
	for j := range subBlocks {
		xs := (*[16]float32)(x[16*j:])
		imp := (*[16]float32)(qw[16*j:])
		var s float32
		for i, v := range xs {
			w[i] = float32(imp[i] * float32(math.Sqrt(float64(sigma2+float32(v*v)))))
			s += w[i]
		}
		sw[j] = s
		scales[j], mins[j], codes[j] = fitRange(xs, &w, importanceSteps, false)
	}

	dm := fitScale(&scales, &ls, &sw)
	mm := fitScale(&mins, &lm, &sw)
	d, dmin := ggmlfp16.Bits(dm), ggmlfp16.Bits(mm)
	sc := (*[subBlocks]byte)(b[:])
	for j := range sc {
		sc[j] = ls[j] | lm[j]<<4
	}
	requantize(x, sc, ggmlfp16.Float32(d), ggmlfp16.Float32(dmin), &codes)
	pack(b, &codes, d, dmin)
}

// requantize recomputes the levels of each sub-block from its scale and min
// codes and the decoded super-scales. A sub-block whose scale decodes to 0
// keeps the levels its fit produced, as in ggml (a NaN scale does not count
// as 0).
func requantize(x *[BlockWeights]float32, sc *[subBlocks]byte, d, dmin float32, codes *[subBlocks]uint32) {
	for j, s := range sc {
		dd := d * float32(s&0xF)
		if dd == 0 {
			continue
		}
		dm := float32(dmin * float32(s>>4))
		xs := (*[16]float32)(x[16*j:])
		var t [16]float32
		for i, v := range xs {
			t[i] = (v + dm) / dd
		}
		// Multiplying by 1 changes no bits, NaN payloads included.
		codes[j] = levelCodes(1, &t)
	}
}

// pack writes the levels, scale codes already in place, into ggml's layout:
// byte 32h+l of qs holds weights 128h+l+32k at bits 2k, k = 0..3.
func pack(b *[BlockBytes]byte, codes *[subBlocks]uint32, d, dmin uint16) {
	qs := (*[64]byte)(b[offQS:])
	for h := range 2 {
		for l := range 32 {
			// Weight 128h+l+32k lies in sub-block 8h+2k+l/16 at position l%16.
			j, sh := 8*h+l>>4, 2*(l&15)
			qs[32*h+l] = byte(codes[j]>>sh&3 | codes[j+2]>>sh&3<<2 | codes[j+4]>>sh&3<<4 | codes[j+6]>>sh&3<<6)
		}
	}
	b[offD], b[offD+1] = byte(d), byte(d>>8)
	b[offDmin], b[offDmin+1] = byte(dmin), byte(dmin>>8)
}

// dequantizeBlock is one block of dequantize_row_q2_K.
func dequantizeBlock(y *[BlockWeights]float32, b *[BlockBytes]byte) {
	d := ggmlfp16.Float32(uint16(b[offD]) | uint16(b[offD+1])<<8)
	dmin := ggmlfp16.Float32(uint16(b[offDmin]) | uint16(b[offDmin+1])<<8)
	qs := (*[64]byte)(b[offQS:])
	for j := range subBlocks {
		s := b[j]
		dl := d * float32(s&0xF)
		ml := float32(dmin * float32(s>>4))
		// Sub-block j: half j/8, shift 2*((j%8)/2), qs bytes 16*(j%2)..+15 of the half.
		q := (*[16]byte)(qs[32*(j>>3)+16*(j&1):])
		sh := 2 * (j & 7 >> 1)
		ys := (*[16]float32)(y[16*j:])
		for i, v := range q {
			ys[i] = float32(dl*levels[v>>sh&3]) - ml
		}
	}
}

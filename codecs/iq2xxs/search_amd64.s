#include "textflag.h"

// Every distance term is rounded as ggml rounds it, (waux*d)*d with two
// VMULPS, and the terms of a candidate are added with separate VADDPS in
// coordinate order: never a fused multiply-add (.ci/run greps this file for
// one), never a reordered sum.

DATA lanes<>+0(SB)/4, $0
DATA lanes<>+4(SB)/4, $1
DATA lanes<>+8(SB)/4, $2
DATA lanes<>+12(SB)/4, $3
DATA lanes<>+16(SB)/4, $4
DATA lanes<>+20(SB)/4, $5
DATA lanes<>+24(SB)/4, $6
DATA lanes<>+28(SB)/4, $7
GLOBL lanes<>(SB), RODATA|NOPTR, $32

DATA shifts<>+0(SB)/4, $0
DATA shifts<>+4(SB)/4, $2
DATA shifts<>+8(SB)/4, $4
DATA shifts<>+12(SB)/4, $6
DATA shifts<>+16(SB)/4, $8
DATA shifts<>+20(SB)/4, $10
DATA shifts<>+24(SB)/4, $12
DATA shifts<>+28(SB)/4, $14
GLOBL shifts<>(SB), RODATA|NOPTR, $32

DATA levelq<>+0(SB)/4, $1.0
DATA levelq<>+4(SB)/4, $3.0
DATA levelq<>+8(SB)/4, $5.0
DATA levelq<>+12(SB)/4, $7.0
DATA levelq<>+16(SB)/4, $1.0
DATA levelq<>+20(SB)/4, $3.0
DATA levelq<>+24(SB)/4, $5.0
DATA levelq<>+28(SB)/4, $7.0
GLOBL levelq<>(SB), RODATA|NOPTR, $32

DATA consts<>+0(SB)/4, $0x7f7fffff  // largest float32
DATA consts<>+4(SB)/4, $0x7f800000  // +Inf
DATA consts<>+8(SB)/4, $8
DATA consts<>+12(SB)/4, $0x7fffffff
DATA consts<>+16(SB)/4, $3.0
DATA consts<>+20(SB)/4, $5.0
DATA consts<>+24(SB)/4, $1.0
DATA consts<>+28(SB)/4, $0.5
DATA consts<>+32(SB)/4, $12582912.0 // nearest_int's 1.5*2^23
DATA consts<>+36(SB)/4, $0x007fffff
DATA consts<>+40(SB)/4, $0x00400000
DATA consts<>+44(SB)/4, $2
DATA consts<>+48(SB)/4, $4
DATA consts<>+52(SB)/4, $0x80000000
GLOBL consts<>(SB), RODATA|NOPTR, $56

// func projectAVX2(xval, waux *[32]float32, ids, scales *float32, n int, codeMap *int32, listAt *uint32, lists *uint16, codes *[4]uint16)
//
// Each trial runs in two passes so that the four groups' independent work
// overlaps: first every group's level code and distance-term tables, then
// the grid lookups and neighbour searches. The locals hold the tables, 256
// bytes a group (coordinate j's at 32*j: the terms of levels 0, 1, 2 and
// +Inf, the padding level, twice), then the four level codes, then the
// trial's offset in ids and scales and the trials left.
TEXT ·projectAVX2(SB), 0, $1056-72
	MOVQ waux+8(FP), DX
	MOVQ codeMap+40(FP), R8
	MOVQ listAt+48(FP), R9
	MOVQ lists+56(FP), R10
	MOVQ codes+64(FP), R11
	MOVQ $0, 1040(SP)
	MOVQ n+32(FP), AX
	MOVQ AX, 1048(SP)

trial:
	MOVQ         xval+0(FP), SI
	MOVQ         1040(SP), AX
	MOVQ         ids+16(FP), BX
	VBROADCASTSS (BX)(AX*1), Y10
	// The scales of the levels: scale, scale*3, scale*5, each rounded.
	MOVQ         scales+24(FP), BX
	VMOVSS       (BX)(AX*1), X11
	VMULSS       consts<>+16(SB), X11, X12
	VMULSS       consts<>+20(SB), X11, X13
	VBROADCASTSS X11, Y11
	VBROADCASTSS X12, Y12
	VBROADCASTSS X13, Y13
	VMOVDQU      shifts<>(SB), Y14
	XORQ         R12, R12 // k*32: group k's offset in xval and waux

prepare:
	// u: the levels min(2, max(0, nearest_int(0.5*(id*x - 1)))), level j
	// in bits 2j..2j+1, stored at 1024+4k(SP).
	VMOVUPS      (SI)(R12*1), Y8
	VMULPS       Y8, Y10, Y0
	VBROADCASTSS consts<>+24(SB), Y1
	VSUBPS       Y1, Y0, Y0
	VBROADCASTSS consts<>+28(SB), Y1
	VMULPS       Y1, Y0, Y0
	VBROADCASTSS consts<>+32(SB), Y1
	VADDPS       Y1, Y0, Y0
	VPBROADCASTD consts<>+36(SB), Y1
	VPAND        Y1, Y0, Y0
	VPBROADCASTD consts<>+40(SB), Y1
	VPSUBD       Y1, Y0, Y0
	VPXOR        Y1, Y1, Y1
	VPMAXSD      Y1, Y0, Y0
	VPBROADCASTD consts<>+44(SB), Y1
	VPMINSD      Y1, Y0, Y0
	VPSLLVD      Y14, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPOR         X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPOR         X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPOR         X1, X0, X0
	MOVQ         R12, BX
	SHRQ         $3, BX
	VMOVD        X0, 1024(SP)(BX*1)

	// The candidate lists (megabytes, beyond the L2 cache) are fetched
	// early for the second pass; an on-grid code fetches a list it does
	// not need, which is harmless.
	VMOVD      X0, AX
	MOVL       (R9)(AX*4), BX
	SHRL       $8, BX
	PREFETCHT0 (R10)(BX*2)

	// Per coordinate, waux*(s-x)^2 as (waux*d)*d, d = s-x, for the three
	// level scales s.
	VMOVUPS (DX)(R12*1), Y9
	VSUBPS  Y8, Y11, Y0
	VMULPS  Y0, Y9, Y4
	VMULPS  Y0, Y4, Y0
	VSUBPS  Y8, Y12, Y1
	VMULPS  Y1, Y9, Y4
	VMULPS  Y1, Y4, Y1
	VSUBPS  Y8, Y13, Y2
	VMULPS  Y2, Y9, Y4
	VMULPS  Y2, Y4, Y2
	VBROADCASTSS consts<>+4(SB), Y3

	// Transpose in each 128-bit lane: Y4..Y7 become the tables of
	// coordinates 0..3 (low lane) and 4..7 (high lane).
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y0
	VUNPCKHPS Y3, Y2, Y1
	VSHUFPS   $0x44, Y0, Y8, Y4
	VSHUFPS   $0xee, Y0, Y8, Y5
	VSHUFPS   $0x44, Y1, Y9, Y6
	VSHUFPS   $0xee, Y1, Y9, Y7

	// Each table repeated in both lanes.
	MOVQ       R12, BX
	SHLQ       $3, BX
	LEAQ       (SP)(BX*1), BX
	VPERM2F128 $0x00, Y4, Y4, Y0
	VMOVUPS    Y0, 0(BX)
	VPERM2F128 $0x00, Y5, Y5, Y0
	VMOVUPS    Y0, 32(BX)
	VPERM2F128 $0x00, Y6, Y6, Y0
	VMOVUPS    Y0, 64(BX)
	VPERM2F128 $0x00, Y7, Y7, Y0
	VMOVUPS    Y0, 96(BX)
	VPERM2F128 $0x11, Y4, Y4, Y0
	VMOVUPS    Y0, 128(BX)
	VPERM2F128 $0x11, Y5, Y5, Y0
	VMOVUPS    Y0, 160(BX)
	VPERM2F128 $0x11, Y6, Y6, Y0
	VMOVUPS    Y0, 192(BX)
	VPERM2F128 $0x11, Y7, Y7, Y0
	VMOVUPS    Y0, 224(BX)

	ADDQ $32, R12
	CMPQ R12, $128
	JLT  prepare

	VBROADCASTSS consts<>+0(SB), Y10 // the largest float32
	VPBROADCASTD consts<>+8(SB), Y11 // 8
	VMOVDQU      lanes<>(SB), Y12
	VPBROADCASTD consts<>+12(SB), Y13 // the largest int32
	XORQ         R12, R12             // k*4

group:
	MOVL  1024(SP)(R12*1), AX
	MOVL  (R8)(AX*4), BX
	TESTL BX, BX
	JGE   store

	// Off the grid: the candidates are lists[start : start+n], listAt[u]
	// = start<<8 | n; SI: the group's tables.
	MOVL (R9)(AX*4), BX
	MOVL BX, CX
	ANDL $0xff, CX
	SHRL $8, BX
	LEAQ (R10)(BX*2), DI
	MOVQ DI, R13
	MOVQ R12, SI
	SHLQ $6, SI
	LEAQ (SP)(SI*1), SI

	VMOVAPS Y10, Y6 // per lane: best distance
	VPXOR   Y7, Y7, Y7 // and the position of its candidate
	VMOVDQA Y12, Y5    // positions of the current candidates

candidates:
	// Y0: eight codes. VPERMPS looks each coordinate's level up by the
	// low three bits, the level and a bit of the next level, which the
	// repeated table ignores.
	VPMOVZXWD (DI), Y0
	VPERMPS   0(SI), Y0, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   32(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   64(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   96(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   128(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   160(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   192(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   224(SI), Y0, Y3
	VADDPS    Y3, Y1, Y1

	// Strictly smaller (ordered: NaN never is) replaces the lane's best.
	VCMPPS    $0x11, Y6, Y1, Y2
	VBLENDVPS Y2, Y1, Y6, Y6
	VBLENDVPS Y2, Y5, Y7, Y7
	VPADDD    Y11, Y5, Y5
	ADDQ      $16, DI
	SUBL      $8, CX
	JGT       candidates

	// The smallest distance of all lanes, then the first position among
	// the lanes that hold it (-0 and +0 compare equal, as in ggml).
	VEXTRACTF128 $1, Y6, X0
	VMINPS       X6, X0, X0
	VSHUFPS      $0x4e, X0, X0, X1
	VMINPS       X1, X0, X0
	VSHUFPS      $0xb1, X0, X0, X1
	VMINPS       X1, X0, X0
	VBROADCASTSS X0, Y0
	VCMPPS       $0x00, Y0, Y6, Y2
	VBLENDVPS    Y2, Y7, Y13, Y1
	VEXTRACTI128 $1, Y1, X0
	VPMINSD      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMINSD      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMINSD      X1, X0, X0
	VMOVD        X0, AX
	MOVWLZX      (R13)(AX*2), AX

store:
	MOVQ R12, BX
	SHRQ $1, BX // k*4 -> k*2 bytes of codes
	MOVW AX, (R11)(BX*1)
	ADDQ $4, R12
	CMPQ R12, $16
	JLT  group

	ADDQ $8, R11
	ADDQ $4, 1040(SP)
	DECQ 1048(SP)
	JNZ  trial

	VZEROUPPER
	RET

// func trialSumsAVX2(weight, xval *[32]float32, codes *[4][16]uint32, sumqx, sumq2 *[16]float32)
//
// Lane t of Y0/Y1 (trials 0..7) and Y2/Y3 (trials 8..15) accumulates
// trial t's sums over the 32 weights in index order.
TEXT ·trialSumsAVX2(SB), NOSPLIT, $0-40
	MOVQ weight+0(FP), SI
	MOVQ xval+8(FP), DX
	MOVQ codes+16(FP), DI
	VMOVUPS levelq<>(SB), Y15
	VXORPS  Y0, Y0, Y0
	VXORPS  Y1, Y1, Y1
	VXORPS  Y2, Y2, Y2
	VXORPS  Y3, Y3, Y3
	MOVQ    $4, CX

sumGroup:
	VMOVDQU (DI), Y4   // the group's codes of trials 0..7
	VMOVDQU 32(DI), Y5 // and of trials 8..15
	MOVQ    $8, BX

sumWeight:
	VMOVSS       (SI), X6
	VMULSS       (DX), X6, X7 // w*x
	VBROADCASTSS X6, Y6
	VBROADCASTSS X7, Y7
	VPERMPS      Y15, Y4, Y8   // q, trials 0..7
	VPERMPS      Y15, Y5, Y9   // q, trials 8..15
	VMULPS       Y8, Y7, Y10   // (w*x)*q
	VADDPS       Y10, Y0, Y0
	VMULPS       Y8, Y6, Y10   // (w*q)*q
	VMULPS       Y8, Y10, Y10
	VADDPS       Y10, Y1, Y1
	VMULPS       Y9, Y7, Y10
	VADDPS       Y10, Y2, Y2
	VMULPS       Y9, Y6, Y10
	VMULPS       Y9, Y10, Y10
	VADDPS       Y10, Y3, Y3
	VPSRLD       $2, Y4, Y4
	VPSRLD       $2, Y5, Y5
	ADDQ         $4, SI
	ADDQ         $4, DX
	DECQ         BX
	JNZ          sumWeight

	ADDQ $64, DI
	DECQ CX
	JNZ  sumGroup

	MOVQ    sumqx+24(FP), AX
	VMOVUPS Y0, (AX)
	VMOVUPS Y2, 32(AX)
	MOVQ    sumq2+32(FP), AX
	VMOVUPS Y1, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// func qpErrorsAVX2(x, w *[32]float32, iscale, scale, mse *[8]float32)
//
// Lane t accumulates trial t's weighted squared error over the 32 weights
// in index order: l = min(4, nearest_int(iscale*x)), d = x - scale*l,
// mse += (w*d)*d.
TEXT ·qpErrorsAVX2(SB), NOSPLIT, $0-40
	MOVQ         x+0(FP), SI
	MOVQ         w+8(FP), DX
	MOVQ         iscale+16(FP), AX
	VMOVUPS      (AX), Y10
	MOVQ         scale+24(FP), AX
	VMOVUPS      (AX), Y11
	VBROADCASTSS consts<>+32(SB), Y12
	VPBROADCASTD consts<>+36(SB), Y13
	VPBROADCASTD consts<>+40(SB), Y14
	VPBROADCASTD consts<>+48(SB), Y15
	VXORPS       Y0, Y0, Y0
	MOVQ         $32, CX

qpWeight:
	VBROADCASTSS (SI), Y1 // x
	VBROADCASTSS (DX), Y2 // w
	VMULPS       Y1, Y10, Y3
	VADDPS       Y12, Y3, Y3
	VPAND        Y13, Y3, Y3
	VPSUBD       Y14, Y3, Y3
	VPMINSD      Y15, Y3, Y3
	VCVTDQ2PS    Y3, Y3
	VMULPS       Y3, Y11, Y3 // scale*l
	VSUBPS       Y3, Y1, Y3  // x - scale*l
	VMULPS       Y3, Y2, Y4  // (w*d)*d
	VMULPS       Y3, Y4, Y4
	VADDPS       Y4, Y0, Y0
	ADDQ         $4, SI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          qpWeight

	MOVQ    mse+32(FP), AX
	VMOVUPS Y0, (AX)
	VZEROUPPER
	RET

// func weightsAVX2(x, qw *[32]float32, sigma2 float32, weight, waux, xval *[32]float32) uint32
//
// weight = sqrt(sigma2 + x*x) * qw and waux = sqrt(weight), each operation
// rounded to float32 (VSQRTPS is correctly rounded, as sqrtf is); xval = x
// negated where !(x >= 0), and those weights' bits in the result.
TEXT ·weightsAVX2(SB), NOSPLIT, $0-52
	MOVQ         x+0(FP), SI
	MOVQ         qw+8(FP), DX
	VBROADCASTSS sigma2+16(FP), Y2
	MOVQ         weight+24(FP), DI
	MOVQ         waux+32(FP), R8
	MOVQ         xval+40(FP), R9
	VPBROADCASTD consts<>+52(SB), Y3 // the sign bit
	VXORPS       Y4, Y4, Y4
	XORQ         AX, AX
	XORL         R10, R10 // the negative weights' bits
	XORL         CX, CX   // their first bit

weights:
	VMOVUPS   (SI)(AX*1), Y1
	VMULPS    Y1, Y1, Y0
	VADDPS    Y0, Y2, Y0
	VSQRTPS   Y0, Y0
	VMULPS    (DX)(AX*1), Y0, Y0
	VMOVUPS   Y0, (DI)(AX*1)
	VSQRTPS   Y0, Y0
	VMOVUPS   Y0, (R8)(AX*1)
	VCMPPS    $0x09, Y4, Y1, Y5 // !(x >= 0)
	VANDPS    Y3, Y5, Y0
	VXORPS    Y0, Y1, Y1
	VMOVUPS   Y1, (R9)(AX*1)
	VMOVMSKPS Y5, BX
	SHLL      CX, BX
	ORL       BX, R10
	ADDL      $8, CX
	ADDQ      $32, AX
	CMPQ      AX, $128
	JLT       weights
	MOVL      R10, ret+48(FP)
	VZEROUPPER
	RET

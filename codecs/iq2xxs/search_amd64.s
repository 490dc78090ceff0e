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

DATA consts<>+0(SB)/4, $0x7f7fffff  // largest float32
DATA consts<>+4(SB)/4, $0x7f800000  // +Inf
DATA consts<>+8(SB)/4, $8
DATA consts<>+12(SB)/4, $0x7fffffff
DATA consts<>+16(SB)/4, $3.0
DATA consts<>+20(SB)/4, $5.0
GLOBL consts<>(SB), RODATA|NOPTR, $24

// func bestNeighbourAVX2(xval, waux *[8]float32, scale float32, codes *uint16, n int) int
//
// The locals hold the eight coordinates' term tables, 32 bytes each:
// levels 0, 1, 2 and +Inf (the padding level), twice.
TEXT ·bestNeighbourAVX2(SB), NOSPLIT, $256-48
	MOVQ xval+0(FP), SI
	MOVQ waux+8(FP), DX
	VMOVUPS (SI), Y8  // x
	VMOVUPS (DX), Y9  // waux

	// The scales of the levels: scale, scale*3, scale*5, each rounded.
	VMOVSS       scale+16(FP), X0
	VMULSS       consts<>+16(SB), X0, X1
	VMULSS       consts<>+20(SB), X0, X2
	VBROADCASTSS X0, Y0
	VBROADCASTSS X1, Y1
	VBROADCASTSS X2, Y2

	// Y0, Y1, Y2: per coordinate, waux*(s-x)^2 as (waux*d)*d, d = s-x.
	VSUBPS Y8, Y0, Y0
	VMULPS Y0, Y9, Y10
	VMULPS Y0, Y10, Y0
	VSUBPS Y8, Y1, Y1
	VMULPS Y1, Y9, Y10
	VMULPS Y1, Y10, Y1
	VSUBPS Y8, Y2, Y2
	VMULPS Y2, Y9, Y10
	VMULPS Y2, Y10, Y2
	VBROADCASTSS consts<>+4(SB), Y3

	// Transpose in each 128-bit lane: Y4..Y7 become the tables of
	// coordinates 0..3 (low lane) and 4..7 (high lane).
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VSHUFPS   $0x44, Y10, Y8, Y4
	VSHUFPS   $0xee, Y10, Y8, Y5
	VSHUFPS   $0x44, Y11, Y9, Y6
	VSHUFPS   $0xee, Y11, Y9, Y7

	// Each table repeated in both lanes, coordinate j at 32*j(SP).
	VPERM2F128 $0x00, Y4, Y4, Y0
	VMOVUPS    Y0, 0(SP)
	VPERM2F128 $0x00, Y5, Y5, Y0
	VMOVUPS    Y0, 32(SP)
	VPERM2F128 $0x00, Y6, Y6, Y0
	VMOVUPS    Y0, 64(SP)
	VPERM2F128 $0x00, Y7, Y7, Y0
	VMOVUPS    Y0, 96(SP)
	VPERM2F128 $0x11, Y4, Y4, Y0
	VMOVUPS    Y0, 128(SP)
	VPERM2F128 $0x11, Y5, Y5, Y0
	VMOVUPS    Y0, 160(SP)
	VPERM2F128 $0x11, Y6, Y6, Y0
	VMOVUPS    Y0, 192(SP)
	VPERM2F128 $0x11, Y7, Y7, Y0
	VMOVUPS    Y0, 224(SP)

	MOVQ         codes+24(FP), DI
	MOVQ         n+32(FP), CX
	VBROADCASTSS consts<>+0(SB), Y6 // per lane: best distance
	VPXOR        Y7, Y7, Y7         // and the position of its candidate
	VMOVDQU      lanes<>(SB), Y5    // positions of the current candidates
	VPBROADCASTD consts<>+8(SB), Y4

loop:
	// Y0: eight codes. VPERMPS looks each coordinate's level up by the
	// low three bits, the level and a bit of the next level, which the
	// repeated table ignores.
	VPMOVZXWD (DI), Y0
	VPERMPS   0(SP), Y0, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   32(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   64(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   96(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   128(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   160(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   192(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1
	VPSRLD    $2, Y0, Y0
	VPERMPS   224(SP), Y0, Y3
	VADDPS    Y3, Y1, Y1

	// Strictly smaller (ordered: NaN never is) replaces the lane's best.
	VCMPPS    $0x11, Y6, Y1, Y2
	VBLENDVPS Y2, Y1, Y6, Y6
	VBLENDVPS Y2, Y5, Y7, Y7
	VPADDD    Y4, Y5, Y5
	ADDQ      $16, DI
	SUBQ      $8, CX
	JGT       loop

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
	VPBROADCASTD consts<>+12(SB), Y1
	VBLENDVPS    Y2, Y7, Y1, Y1
	VEXTRACTI128 $1, Y1, X0
	VPMINSD      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMINSD      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMINSD      X1, X0, X0
	VMOVD        X0, AX
	MOVQ         AX, ret+40(FP)
	VZEROUPPER
	RET

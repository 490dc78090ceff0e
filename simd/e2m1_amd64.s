#include "textflag.h"

DATA e2m1LowNibble<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA e2m1LowNibble<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL e2m1LowNibble<>(SB), RODATA|NOPTR, $16

DATA e2m1Sign<>+0(SB)/4, $0x80000000
GLOBL e2m1Sign<>(SB), RODATA|NOPTR, $4

// func decodeE2M1AVX2(dst *float32, codes, scales *byte, scaleOf *[256]float32, magnitudes *[8]float32, n int)
TEXT ·decodeE2M1AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ scales+16(FP), BX
	MOVQ scaleOf+24(FP), R8
	MOVQ magnitudes+32(FP), R9
	MOVQ n+40(FP), CX
	VMOVUPS (R9), Y15
	VMOVDQU e2m1LowNibble<>(SB), X14
	VBROADCASTSS e2m1Sign<>(SB), Y13

loop:
	MOVBLZX (BX), AX
	VBROADCASTSS (R8)(AX*4), Y12
	VMOVDQU (SI), X0
	VPAND X14, X0, X1          // low nibbles: even values
	VPSRLW $4, X0, X2
	VPAND X14, X2, X2          // high nibbles: odd values
	VPUNPCKLBW X2, X1, X3      // values 0-15, one a byte
	VPUNPCKHBW X2, X1, X4      // values 16-31

	VPMOVZXBD X3, Y5
	VPSRLDQ $8, X3, X3
	VPMOVZXBD X3, Y6
	VPMOVZXBD X4, Y7
	VPSRLDQ $8, X4, X4
	VPMOVZXBD X4, Y8

	VPERMPS Y15, Y5, Y0
	VPSLLD $28, Y5, Y5
	VPAND Y13, Y5, Y5
	VPOR Y5, Y0, Y0
	VMULPS Y12, Y0, Y0
	VMOVUPS Y0, (DI)

	VPERMPS Y15, Y6, Y1
	VPSLLD $28, Y6, Y6
	VPAND Y13, Y6, Y6
	VPOR Y6, Y1, Y1
	VMULPS Y12, Y1, Y1
	VMOVUPS Y1, 32(DI)

	VPERMPS Y15, Y7, Y2
	VPSLLD $28, Y7, Y7
	VPAND Y13, Y7, Y7
	VPOR Y7, Y2, Y2
	VMULPS Y12, Y2, Y2
	VMOVUPS Y2, 64(DI)

	VPERMPS Y15, Y8, Y3
	VPSLLD $28, Y8, Y8
	VPAND Y13, Y8, Y8
	VPOR Y8, Y3, Y3
	VMULPS Y12, Y3, Y3
	VMOVUPS Y3, 96(DI)

	ADDQ $128, DI
	ADDQ $16, SI
	INCQ BX
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

#include "textflag.h"

// func axpy8(y, x *float32, a float32, n8 int)
TEXT ·axpy8(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS a+16(FP), Y0
	MOVQ n8+24(FP), CX

loop:
	VMOVUPS (SI), Y1
	VMULPS Y0, Y1, Y1
	VADDPS (DI), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

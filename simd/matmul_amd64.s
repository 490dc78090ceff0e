#include "textflag.h"

// Dot-product tiles for MatMulT on AVX2 + FMA. A tile multiplies R rows of
// x by 4 rows of w (both read along k) into R×4 sums, one 8-lane
// accumulator per element. Every kernel updates an element's accumulator
// with the same FMAs in the same order and folds its lanes the same way,
// ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)), so an element's value does not
// depend on which tile computed it. With add set, the sums are added to
// dst rather than stored.
//
// Arguments: x, w, dst pointers; ldx, ldw, ldd row strides in bytes; k8
// the number of floats, a positive multiple of 8; add.

// FOLD4 reduces accumulators a, b, c, d (Y registers, their X halves named
// xa..xd) into xa = [Σa, Σb, Σc, Σd]; X12-X15 are scratch.
#define FOLD4(ya, yb, yc, yd, xa, xb, xc, xd) \
	VEXTRACTF128 $1, ya, X12 \
	VADDPS       X12, xa, xa \
	VEXTRACTF128 $1, yb, X13 \
	VADDPS       X13, xb, xb \
	VEXTRACTF128 $1, yc, X14 \
	VADDPS       X14, xc, xc \
	VEXTRACTF128 $1, yd, X15 \
	VADDPS       X15, xd, xd \
	VHADDPS      xb, xa, xa  \
	VHADDPS      xd, xc, xc  \
	VHADDPS      xc, xa, xa

// STORE4 writes (or, with add, adds to) the four floats of x at (p).
#define STORE4(x, p) \
	CMPB    add+56(FP), $0 \
	JEQ     2(PC)          \
	VADDPS  (p), x, x      \
	VMOVUPS x, (p)

// func dot3x4(x, w, dst *float32, ldx, ldw, ldd, k8 int, add bool)
TEXT ·dot3x4(SB), NOSPLIT, $0-57
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ ldx+24(FP), AX
	MOVQ ldw+32(FP), BX
	MOVQ ldd+40(FP), R13
	MOVQ k8+48(FP), CX
	SHLQ $2, CX
	LEAQ (SI)(AX*1), R11
	LEAQ (R11)(AX*1), R12
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop3:
	VMOVUPS     (SI)(AX*1), Y12
	VMOVUPS     (R11)(AX*1), Y13
	VMOVUPS     (R12)(AX*1), Y14
	VMOVUPS     (DI)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y1
	VFMADD231PS Y15, Y14, Y2
	VMOVUPS     (R8)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y5
	VMOVUPS     (R9)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y6
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS     (R10)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y9
	VFMADD231PS Y15, Y13, Y10
	VFMADD231PS Y15, Y14, Y11
	ADDQ        $32, AX
	CMPQ        AX, CX
	JB          loop3

	FOLD4(Y0, Y3, Y6, Y9, X0, X3, X6, X9)
	FOLD4(Y1, Y4, Y7, Y10, X1, X4, X7, X10)
	FOLD4(Y2, Y5, Y8, Y11, X2, X5, X8, X11)
	STORE4(X0, DX)
	ADDQ R13, DX
	STORE4(X1, DX)
	ADDQ R13, DX
	STORE4(X2, DX)
	VZEROUPPER
	RET

// func dot2x4(x, w, dst *float32, ldx, ldw, ldd, k8 int, add bool)
TEXT ·dot2x4(SB), NOSPLIT, $0-57
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ ldx+24(FP), AX
	MOVQ ldw+32(FP), BX
	MOVQ ldd+40(FP), R13
	MOVQ k8+48(FP), CX
	SHLQ $2, CX
	LEAQ (SI)(AX*1), R11
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10

loop2:
	VMOVUPS     (SI)(AX*1), Y12
	VMOVUPS     (R11)(AX*1), Y13
	VMOVUPS     (DI)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y1
	VMOVUPS     (R8)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y4
	VMOVUPS     (R9)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y6
	VFMADD231PS Y15, Y13, Y7
	VMOVUPS     (R10)(AX*1), Y15
	VFMADD231PS Y15, Y12, Y9
	VFMADD231PS Y15, Y13, Y10
	ADDQ        $32, AX
	CMPQ        AX, CX
	JB          loop2

	FOLD4(Y0, Y3, Y6, Y9, X0, X3, X6, X9)
	FOLD4(Y1, Y4, Y7, Y10, X1, X4, X7, X10)
	STORE4(X0, DX)
	ADDQ R13, DX
	STORE4(X1, DX)
	VZEROUPPER
	RET

// func dot1x4(x, w, dst *float32, ldx, ldw, ldd, k8 int, add bool)
TEXT ·dot1x4(SB), NOSPLIT, $0-57
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ ldw+32(FP), BX
	MOVQ k8+48(FP), CX
	SHLQ $2, CX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y3, Y3, Y3
	VXORPS Y6, Y6, Y6
	VXORPS Y9, Y9, Y9

loop1:
	VMOVUPS     (SI)(AX*1), Y12
	VFMADD231PS (DI)(AX*1), Y12, Y0
	VFMADD231PS (R8)(AX*1), Y12, Y3
	VFMADD231PS (R9)(AX*1), Y12, Y6
	VFMADD231PS (R10)(AX*1), Y12, Y9
	ADDQ        $32, AX
	CMPQ        AX, CX
	JB          loop1

	FOLD4(Y0, Y3, Y6, Y9, X0, X3, X6, X9)
	STORE4(X0, DX)
	VZEROUPPER
	RET

// func dot1x1(x, w, dst *float32, k8 int, add bool)
TEXT ·dot1x1(SB), NOSPLIT, $0-33
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ k8+24(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
	VXORPS Y0, Y0, Y0

loop11:
	VMOVUPS     (SI)(AX*1), Y12
	VFMADD231PS (DI)(AX*1), Y12, Y0
	ADDQ        $32, AX
	CMPQ        AX, CX
	JB          loop11

	VEXTRACTF128 $1, Y0, X12
	VADDPS       X12, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	CMPB         add+32(FP), $0
	JEQ          store11
	VADDSS       (DX), X0, X0

store11:
	VMOVSS X0, (DX)
	VZEROUPPER
	RET

// The same tiles with w in bfloat16: each w vector is widened to float32
// as it is loaded (zero-extend, shift into the high half), so the sums
// equal those of the float32 tiles on the widened matrix, bit for bit.
// BX is the byte offset into w's rows, half of AX's into x's.

// func dot3x4h(x *float32, w *uint16, dst *float32, ldx, ldw, ldd, k8 int, add bool)
TEXT ·dot3x4h(SB), NOSPLIT, $0-57
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ ldx+24(FP), AX
	MOVQ ldw+32(FP), BX
	MOVQ ldd+40(FP), R13
	MOVQ k8+48(FP), CX
	SHLQ $2, CX
	LEAQ (SI)(AX*1), R11
	LEAQ (R11)(AX*1), R12
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	XORQ BX, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop3h:
	VMOVUPS     (SI)(AX*1), Y12
	VMOVUPS     (R11)(AX*1), Y13
	VMOVUPS     (R12)(AX*1), Y14
	VPMOVZXWD   (DI)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y1
	VFMADD231PS Y15, Y14, Y2
	VPMOVZXWD   (R8)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y5
	VPMOVZXWD   (R9)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y6
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y8
	VPMOVZXWD   (R10)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y9
	VFMADD231PS Y15, Y13, Y10
	VFMADD231PS Y15, Y14, Y11
	ADDQ        $32, AX
	ADDQ        $16, BX
	CMPQ        AX, CX
	JB          loop3h

	FOLD4(Y0, Y3, Y6, Y9, X0, X3, X6, X9)
	FOLD4(Y1, Y4, Y7, Y10, X1, X4, X7, X10)
	FOLD4(Y2, Y5, Y8, Y11, X2, X5, X8, X11)
	STORE4(X0, DX)
	ADDQ R13, DX
	STORE4(X1, DX)
	ADDQ R13, DX
	STORE4(X2, DX)
	VZEROUPPER
	RET

// func dot2x4h(x *float32, w *uint16, dst *float32, ldx, ldw, ldd, k8 int, add bool)
TEXT ·dot2x4h(SB), NOSPLIT, $0-57
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ ldx+24(FP), AX
	MOVQ ldw+32(FP), BX
	MOVQ ldd+40(FP), R13
	MOVQ k8+48(FP), CX
	SHLQ $2, CX
	LEAQ (SI)(AX*1), R11
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	XORQ BX, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10

loop2h:
	VMOVUPS     (SI)(AX*1), Y12
	VMOVUPS     (R11)(AX*1), Y13
	VPMOVZXWD   (DI)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y1
	VPMOVZXWD   (R8)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y4
	VPMOVZXWD   (R9)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y6
	VFMADD231PS Y15, Y13, Y7
	VPMOVZXWD   (R10)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y9
	VFMADD231PS Y15, Y13, Y10
	ADDQ        $32, AX
	ADDQ        $16, BX
	CMPQ        AX, CX
	JB          loop2h

	FOLD4(Y0, Y3, Y6, Y9, X0, X3, X6, X9)
	FOLD4(Y1, Y4, Y7, Y10, X1, X4, X7, X10)
	STORE4(X0, DX)
	ADDQ R13, DX
	STORE4(X1, DX)
	VZEROUPPER
	RET

// func dot1x4h(x *float32, w *uint16, dst *float32, ldx, ldw, ldd, k8 int, add bool)
TEXT ·dot1x4h(SB), NOSPLIT, $0-57
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ ldw+32(FP), BX
	MOVQ k8+48(FP), CX
	SHLQ $2, CX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	XORQ BX, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y3, Y3, Y3
	VXORPS Y6, Y6, Y6
	VXORPS Y9, Y9, Y9

loop1h:
	VMOVUPS     (SI)(AX*1), Y12
	VPMOVZXWD   (DI)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y0
	VPMOVZXWD   (R8)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y3
	VPMOVZXWD   (R9)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y6
	VPMOVZXWD   (R10)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y9
	ADDQ        $32, AX
	ADDQ        $16, BX
	CMPQ        AX, CX
	JB          loop1h

	FOLD4(Y0, Y3, Y6, Y9, X0, X3, X6, X9)
	STORE4(X0, DX)
	VZEROUPPER
	RET

// func dot1x1h(x *float32, w *uint16, dst *float32, k8 int, add bool)
TEXT ·dot1x1h(SB), NOSPLIT, $0-33
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dst+16(FP), DX
	MOVQ k8+24(FP), CX
	SHLQ $2, CX
	XORQ AX, AX
	XORQ BX, BX
	VXORPS Y0, Y0, Y0

loop11h:
	VMOVUPS     (SI)(AX*1), Y12
	VPMOVZXWD   (DI)(BX*1), Y15
	VPSLLD      $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y0
	ADDQ        $32, AX
	ADDQ        $16, BX
	CMPQ        AX, CX
	JB          loop11h

	VEXTRACTF128 $1, Y0, X12
	VADDPS       X12, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	CMPB         add+32(FP), $0
	JEQ          store11h
	VADDSS       (DX), X0, X0

store11h:
	VMOVSS X0, (DX)
	VZEROUPPER
	RET

// func fmaLoop(n int)
//
// fmaLoop runs n iterations of 12 independent 8-lane FMAs on registers
// only: the machine's peak float32 rate, without memory.
TEXT ·fmaLoop(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13

peak:
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ        CX
	JNZ         peak
	VZEROUPPER
	RET

// func widenBF16(dst *float32, src *uint16, n8 int)
//
// widenBF16 converts n8 (a positive multiple of 8) bfloat16 values to
// float32: each is the high half of its float32.
TEXT ·widenBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	SHRQ $3, CX

widen:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       widen
	VZEROUPPER
	RET

#include "textflag.h"
#include "broadcast_amd64.h"

// func maxLow7s8(dst, src *byte, n8 int)
//
// Eight blocks fold into one register by unpacking pairs bytewise, then
// wordwise, then doubleword-wise and keeping the maximum each time, which
// leaves the eight blocks' partial maxima interleaved in order; two more
// folds across the qwords and the lanes finish them.
TEXT ·maxLow7s8(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	BROADCAST32($0x7f7f7f7f, AX, X15, Y15)

loop:
	VPAND   (SI), Y15, Y0
	VPAND   32(SI), Y15, Y1
	VPAND   64(SI), Y15, Y2
	VPAND   96(SI), Y15, Y3
	VPAND   128(SI), Y15, Y4
	VPAND   160(SI), Y15, Y5
	VPAND   192(SI), Y15, Y6
	VPAND   224(SI), Y15, Y7
	VPUNPCKLBW Y1, Y0, Y8
	VPUNPCKHBW Y1, Y0, Y0
	VPMAXUB    Y8, Y0, Y0
	VPUNPCKLBW Y3, Y2, Y8
	VPUNPCKHBW Y3, Y2, Y2
	VPMAXUB    Y8, Y2, Y2
	VPUNPCKLBW Y5, Y4, Y8
	VPUNPCKHBW Y5, Y4, Y4
	VPMAXUB    Y8, Y4, Y4
	VPUNPCKLBW Y7, Y6, Y8
	VPUNPCKHBW Y7, Y6, Y6
	VPMAXUB    Y8, Y6, Y6
	VPUNPCKLWD Y2, Y0, Y8
	VPUNPCKHWD Y2, Y0, Y0
	VPMAXUB    Y8, Y0, Y0
	VPUNPCKLWD Y6, Y4, Y8
	VPUNPCKHWD Y6, Y4, Y4
	VPMAXUB    Y8, Y4, Y4
	VPUNPCKLDQ Y4, Y0, Y8
	VPUNPCKHDQ Y4, Y0, Y0
	VPMAXUB    Y8, Y0, Y0
	VPSHUFD    $0x4e, Y0, Y8
	VPMAXUB    Y8, Y0, Y0
	VEXTRACTI128 $1, Y0, X8
	VPMAXUB    X8, X0, X0
	MOVQ X0, (DI)
	ADDQ $256, SI
	ADDQ $8, DI
	DECQ CX
	JNZ  loop
	VZEROUPPER
	RET

// CODE leaves in b the codes of the block at off(SI) under the Steps at t:
// the count of thresholds the magnitude exceeds (a sum of -1 masks,
// subtracted), plus 8 where b^0x80 is a positive signed byte, that is
// where b is negative with a nonzero magnitude. m, c1, c2 are scratch.
#define CODE(off, t, b, m, c1, c2) \
	VMOVDQU  off(SI), b      \
	VPAND    Y15, b, m       \
	VPCMPGTB (t), m, c1      \
	VPCMPGTB 32(t), m, c2    \
	VPADDB   c2, c1, c1      \
	VPCMPGTB 64(t), m, c2    \
	VPADDB   c2, c1, c1      \
	VPCMPGTB 96(t), m, c2    \
	VPADDB   c2, c1, c1      \
	VPCMPGTB 128(t), m, c2   \
	VPADDB   c2, c1, c1      \
	VPCMPGTB 160(t), m, c2   \
	VPADDB   c2, c1, c1      \
	VPCMPGTB 192(t), m, c2   \
	VPADDB   c2, c1, c1      \
	VPXOR    Y14, b, b       \
	VPCMPGTB Y12, b, b       \
	VPAND    Y13, b, b       \
	VPSUBB   c1, b, b

// func packSteps2(dst, src *byte, steps *Steps, nsteps int, sel *byte, n2 int) (done int)
//
// It stops before a pair with a selector of nsteps or more and returns how
// many pairs it packed.
//
// Y15 = 0x7F, Y14 = 0x80, Y13 = 8, Y12 = 0, Y11 = the pair weights 1, 16
// that VPMADDUBSW uses to put an odd element's code in the high nibble.
TEXT ·packSteps2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ steps+16(FP), R10
	MOVQ nsteps+24(FP), R11
	MOVQ sel+32(FP), R9
	MOVQ n2+40(FP), CX
	MOVQ CX, R12
	BROADCAST32($0x7f7f7f7f, AX, X15, Y15)
	BROADCAST32($0x80808080, AX, X14, Y14)
	BROADCAST32($0x08080808, AX, X13, Y13)
	VPXOR Y12, Y12, Y12
	BROADCAST32($0x10011001, AX, X11, Y11)

loop:
	MOVBQZX (R9), AX
	CMPQ    AX, R11
	JAE     stop
	IMUL3Q  $224, AX, AX
	ADDQ    R10, AX
	MOVBQZX 1(R9), BX
	CMPQ    BX, R11
	JAE     stop
	IMUL3Q  $224, BX, BX
	ADDQ    R10, BX
	CODE(0, AX, Y0, Y1, Y2, Y3)
	CODE(32, BX, Y4, Y5, Y6, Y7)
	VPMADDUBSW Y11, Y0, Y0
	VPMADDUBSW Y11, Y4, Y4
	VPACKUSWB  Y4, Y0, Y0
	VPERMQ     $0xd8, Y0, Y0
	VMOVDQU    Y0, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	ADDQ $2, R9
	DECQ CX
	JNZ  loop

stop:
	SUBQ CX, R12
	MOVQ R12, done+48(FP)
	VZEROUPPER
	RET

// SHUF2 looks lo up in the Shifts tables at off and off+32 and leaves in
// r the first where bit 7 of mask is clear, the second where it is set.
#define SHUF2(off, r, x) \
	VMOVDQU   off(AX), r      \
	VPSHUFB   Y1, r, r        \
	VMOVDQU   off+32(AX), x   \
	VPSHUFB   Y1, x, x        \
	VPBLENDVB Y2, x, r, r

// func rescaleE8M0x32(t, sel, top, s *byte, shifts *Shifts, bias byte, n32 int)
//
// A magnitude's shift is found by VPSHUFB in each of the eight 16-entry
// tables with its low nibble, then chosen among them by a tree of blends
// on its bits 4, 5 and 6, each shifted into bit 7 where VPBLENDVB looks.
// The sum s + shift is made with unsigned saturation, its positive and
// negative parts apart, and clamped into [1, 254]; the NaN and zero
// blocks are patched in last.
TEXT ·rescaleE8M0x32(SB), NOSPLIT, $0-56
	MOVQ    t+0(FP), DI
	MOVQ    sel+8(FP), R8
	MOVQ    top+16(FP), SI
	MOVQ    s+24(FP), DX
	MOVQ    shifts+32(FP), AX
	MOVBLZX bias+40(FP), BX
	MOVQ    n32+48(FP), CX
	BROADCAST32($0x0f0f0f0f, R9, X15, Y15)
	BROADCAST32($0x7f7f7f7f, R9, X14, Y14)
	BROADCAST32($0x01010101, R9, X13, Y13)
	BROADCAST32($0xfefefefe, R9, X12, Y12)
	MOVD    BX, X11
	VPBROADCASTB X11, Y11
	VPXOR   Y10, Y10, Y10
	VPCMPEQB Y9, Y9, Y9

loop:
	VMOVDQU (SI), Y0
	VPAND   Y14, Y0, Y0 // top & 0x7F
	VPAND   Y15, Y0, Y1 // its low nibble
	VPSLLW  $3, Y0, Y2  // bit 4 to bit 7
	SHUF2(0, Y3, Y4)
	SHUF2(64, Y4, Y5)
	SHUF2(128, Y5, Y6)
	SHUF2(192, Y6, Y7)
	VPSLLW    $2, Y0, Y2 // bit 5 to bit 7
	VPBLENDVB Y2, Y4, Y3, Y3
	VPBLENDVB Y2, Y6, Y5, Y5
	VPSLLW    $1, Y0, Y2 // bit 6 to bit 7
	VPBLENDVB Y2, Y5, Y3, Y3 // the shifts

	VMOVDQU  (DX), Y1   // s
	VPMAXSB  Y10, Y3, Y4 // max(shift, 0)
	VPSUBB   Y3, Y10, Y5
	VPMAXSB  Y10, Y5, Y5 // max(-shift, 0)
	VPADDUSB Y4, Y1, Y6
	VPSUBUSB Y5, Y6, Y6
	VPMAXUB  Y13, Y6, Y6
	VPMINUB  Y12, Y6, Y6 // min(max(s + shift, 1), 254)

	VPCMPEQB  Y14, Y0, Y4 // NaN element
	VPCMPEQB  Y9, Y1, Y7  // NaN scale
	VPOR      Y7, Y4, Y4
	VPCMPEQB  Y10, Y0, Y5 // zeros
	VPBLENDVB Y5, Y13, Y6, Y6
	VPOR      Y4, Y6, Y6
	VMOVDQU   Y6, (DI)

	VPSUBB  Y6, Y1, Y7
	VPADDB  Y11, Y7, Y7
	VPOR    Y5, Y4, Y4
	VPANDN  Y7, Y4, Y7
	VMOVDQU Y7, (R8)

	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	ADDQ $32, R8
	DECQ CX
	JNZ  loop
	VZEROUPPER
	RET

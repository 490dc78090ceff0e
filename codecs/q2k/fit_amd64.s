#include "textflag.h"

// Eight sub-blocks side by side, one per lane, each running fitRange's
// (make_qkx2_quants') exact sequence of single-precision operations: every
// product rounded before it is added (separate VMULPS and VADDPS, never a
// fused multiply-add; .ci/run greps this file for one), every sum in index
// order, every branch a per-lane mask.

DATA fitConsts<>+0(SB)/4, $3.0
DATA fitConsts<>+4(SB)/4, $1.0
DATA fitConsts<>+8(SB)/4, $12582912.0 // nearest_int's 1.5*2^23
DATA fitConsts<>+12(SB)/4, $0x007fffff
DATA fitConsts<>+16(SB)/4, $0x00400000
DATA fitConsts<>+20(SB)/4, $3
DATA fitConsts<>+24(SB)/4, $0x7fffffff
DATA fitConsts<>+28(SB)/4, $0x80000000
GLOBL fitConsts<>(SB), RODATA|NOPTR, $32

// LEVELINT turns the products in reg into levels max(0, min(3,
// nearest_int(v))) as int32, using tmp.
#define LEVELINT(reg, tmp) \
	VBROADCASTSS fitConsts<>+8(SB), tmp; \
	VADDPS       tmp, reg, reg; \
	VPBROADCASTD fitConsts<>+12(SB), tmp; \
	VPAND        tmp, reg, reg; \
	VPBROADCASTD fitConsts<>+16(SB), tmp; \
	VPSUBD       tmp, reg, reg; \
	VPXOR        tmp, tmp, tmp; \
	VPMAXSD      tmp, reg, reg; \
	VPBROADCASTD fitConsts<>+20(SB), tmp; \
	VPMINSD      tmp, reg, reg

// LEVEL is LEVELINT with the levels converted back to float32.
#define LEVEL(reg, tmp) \
	LEVELINT(reg, tmp); \
	VCVTDQ2PS reg, reg

// ADDERROR adds to acc the error terms w*|scale*l + min - x| of the row
// of weights at offset AX: levels l at (levels), x at (SI), w at (DX);
// mask clears the sign bit. It uses Y1.
#define ADDERROR(levels, scale, min, mask, acc) \
	VMULPS (levels)(AX*1), scale, Y1; \
	VADDPS min, Y1, Y1; \
	VSUBPS (SI)(AX*1), Y1, Y1; \
	VANDPS mask, Y1, Y1; \
	VMULPS (DX)(AX*1), Y1, Y1; \
	VADDPS Y1, acc, acc

// func fitRangeMADAVX2(x, w *[16][8]float32, steps *float32, nsteps int, scale, negMin *[8]float32, levels *[16][8]float32)
//
// x[i][j] and w[i][j] are weight i of sub-block j. The locals hold the
// levels of the current trial, laid out as levels.
TEXT ·fitRangeMADAVX2(SB), NOSPLIT, $512-56
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DX
	MOVQ levels+48(FP), DI

	// Y10 lo, Y11 hi, Y8 sum of w, Y9 sum of w*x.
	VMOVUPS (SI), Y10
	VMOVAPS Y10, Y11
	VMOVUPS (DX), Y8
	VMULPS  Y10, Y8, Y9
	MOVQ    $32, AX

minmax:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS (DX)(AX*1), Y1
	VMINPS  Y10, Y0, Y10 // x < lo ? x : lo
	VMAXPS  Y11, Y0, Y11 // x > hi ? x : hi
	VADDPS  Y1, Y8, Y8
	VMULPS  Y0, Y1, Y2
	VADDPS  Y2, Y9, Y9
	ADDQ    $32, AX
	CMPQ    AX, $512
	JLT     minmax

	// lo > 0 becomes 0; Y14: the lanes with hi != lo, which fit.
	VXORPS    Y0, Y0, Y0
	VCMPPS    $0x1e, Y0, Y10, Y1
	VBLENDVPS Y1, Y0, Y10, Y10
	VCMPPS    $0x04, Y10, Y11, Y14

	// The first fit: levels at iscale = 3/(hi-lo), scale 1/iscale.
	VSUBPS       Y10, Y11, Y7
	VBROADCASTSS fitConsts<>+0(SB), Y0
	VDIVPS       Y7, Y0, Y0
	VBROADCASTSS fitConsts<>+4(SB), Y1
	VDIVPS       Y0, Y1, Y12
	XORQ         AX, AX

firstLevels:
	VMOVUPS (SI)(AX*1), Y4
	VSUBPS  Y10, Y4, Y4
	VMULPS  Y4, Y0, Y4
	LEVEL(Y4, Y5)
	VMOVUPS Y4, (DI)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, $512
	JLT     firstLevels

	// Y13: its error, sum of w*|scale*l + lo - x|.
	VXORPS       Y13, Y13, Y13
	VPBROADCASTD fitConsts<>+24(SB), Y15
	XORQ         AX, AX

firstError:
	ADDERROR(DI, Y12, Y10, Y15, Y13)
	ADDQ $32, AX
	CMPQ AX, $512
	JLT  firstError

	MOVQ steps+16(FP), R8
	MOVQ nsteps+24(FP), R9

trial:
	// Y0: iscale = step/(hi-lo), with lo as the fit so far moved it.
	VSUBPS       Y10, Y11, Y7
	VBROADCASTSS (R8), Y0
	VDIVPS       Y7, Y0, Y0
	VXORPS       Y1, Y1, Y1 // sum of w*l
	VXORPS       Y2, Y2, Y2 // sum of w*l*l
	VXORPS       Y3, Y3, Y3 // sum of w*l*x
	XORQ         AX, AX

trialLevels:
	VMOVUPS (SI)(AX*1), Y6
	VSUBPS  Y10, Y6, Y4
	VMULPS  Y4, Y0, Y4
	LEVEL(Y4, Y5)
	VMOVUPS Y4, (SP)(AX*1)
	VMULPS  (DX)(AX*1), Y4, Y5 // wl = w*l
	VADDPS  Y5, Y1, Y1
	VMULPS  Y4, Y5, Y7
	VADDPS  Y7, Y2, Y2
	VMULPS  Y6, Y5, Y7
	VADDPS  Y7, Y3, Y3
	ADDQ    $32, AX
	CMPQ    AX, $512
	JLT     trialLevels

	// Y4: det = sumW*sl2 - sl*sl; Y15: det > 0.
	VMULPS Y2, Y8, Y4
	VMULPS Y1, Y1, Y5
	VSUBPS Y5, Y4, Y4
	VXORPS Y6, Y6, Y6
	VCMPPS $0x1e, Y6, Y4, Y15

	// Y5: ts = (sumW*sxl - sumX*sl)/det; Y6: tm = (sl2*sumX - sl*sxl)/det.
	VMULPS Y3, Y8, Y5
	VMULPS Y1, Y9, Y6
	VSUBPS Y6, Y5, Y5
	VDIVPS Y4, Y5, Y5
	VMULPS Y9, Y2, Y6
	VMULPS Y3, Y1, Y7
	VSUBPS Y7, Y6, Y6
	VDIVPS Y4, Y6, Y6

	// tm > 0: tm = 0, ts = sxl/sl2.
	VXORPS    Y7, Y7, Y7
	VCMPPS    $0x1e, Y7, Y6, Y4
	VBLENDVPS Y4, Y7, Y6, Y6
	VDIVPS    Y2, Y3, Y1
	VBLENDVPS Y4, Y1, Y5, Y5

	// Y0: the trial's error.
	VXORPS       Y0, Y0, Y0
	VPBROADCASTD fitConsts<>+24(SB), Y7
	XORQ         AX, AX

trialError:
	ADDERROR(SP, Y5, Y6, Y7, Y0)
	ADDQ $32, AX
	CMPQ AX, $512
	JLT  trialError

	// Y1: lanes that fit, with det > 0 and a smaller error, take the trial.
	VCMPPS    $0x11, Y13, Y0, Y1
	VANDPS    Y15, Y1, Y1
	VANDPS    Y14, Y1, Y1
	VBLENDVPS Y1, Y0, Y13, Y13
	VBLENDVPS Y1, Y5, Y12, Y12
	VBLENDVPS Y1, Y6, Y10, Y10
	XORQ      AX, AX

take:
	VMOVUPS   (DI)(AX*1), Y2
	VBLENDVPS Y1, (SP)(AX*1), Y2, Y2
	VMOVUPS   Y2, (DI)(AX*1)
	ADDQ      $32, AX
	CMPQ      AX, $512
	JLT       take

	ADDQ $4, R8
	DECQ R9
	JNZ  trial

	// Lanes with hi == lo: scale 0, levels 0, min -lo.
	VXORPS    Y0, Y0, Y0
	VBLENDVPS Y14, Y12, Y0, Y12
	XORQ      AX, AX

clearLevels:
	VANDPS  (DI)(AX*1), Y14, Y2
	VMOVUPS Y2, (DI)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, $512
	JLT     clearLevels

	MOVQ         scale+32(FP), AX
	VMOVUPS      Y12, (AX)
	VPBROADCASTD fitConsts<>+28(SB), Y1
	VXORPS       Y1, Y10, Y10
	MOVQ         negMin+40(FP), AX
	VMOVUPS      Y10, (AX)
	VZEROUPPER
	RET

DATA levelShifts<>+0(SB)/4, $0
DATA levelShifts<>+4(SB)/4, $2
DATA levelShifts<>+8(SB)/4, $4
DATA levelShifts<>+12(SB)/4, $6
DATA levelShifts<>+16(SB)/4, $8
DATA levelShifts<>+20(SB)/4, $10
DATA levelShifts<>+24(SB)/4, $12
DATA levelShifts<>+28(SB)/4, $14
GLOBL levelShifts<>(SB), RODATA|NOPTR, $32

// func requantizeAVX2(x *[256]float32, dm, dd *[16]float32, codes *[16]uint32)
//
// codes[j] packs the levels of (x + dm[j])/dd[j] over sub-block j.
TEXT ·requantizeAVX2(SB), NOSPLIT, $0-32
	MOVQ    x+0(FP), SI
	MOVQ    dm+8(FP), R8
	MOVQ    dd+16(FP), R9
	MOVQ    codes+24(FP), DI
	VMOVDQU levelShifts<>(SB), Y8
	MOVQ    $16, CX

requant:
	VBROADCASTSS (R8), Y6
	VBROADCASTSS (R9), Y7
	// x is the first source of the addition, as in requantize's x + dm:
	// when both are NaN (dm is Inf x 0 when the fp16 super-scale
	// overflows), the result is the first source's NaN, whose payload
	// nearest_int's bit trick turns into the level.
	VMOVUPS      (SI), Y0
	VADDPS       Y6, Y0, Y0
	VDIVPS       Y7, Y0, Y0
	VMOVUPS      32(SI), Y1
	VADDPS       Y6, Y1, Y1
	VDIVPS       Y7, Y1, Y1
	LEVELINT(Y0, Y2)
	LEVELINT(Y1, Y2)
	VPSLLVD      Y8, Y0, Y0
	VPSLLVD      Y8, Y1, Y1
	VPSLLD       $16, Y1, Y1
	VPOR         Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPOR         X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPOR         X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPOR         X1, X0, X0
	VMOVD        X0, (DI)
	ADDQ         $64, SI
	ADDQ         $4, R8
	ADDQ         $4, R9
	ADDQ         $4, DI
	DECQ         CX
	JNZ          requant
	VZEROUPPER
	RET

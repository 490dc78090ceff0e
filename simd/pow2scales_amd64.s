#include "textflag.h"
#include "broadcast_amd64.h"

// BROADCASTB fills every byte of y with the byte argument at arg, through
// AX and x, y's low half.
#define BROADCASTB(arg, x, y) \
	MOVBLZX arg, AX \
	MOVD    AX, x   \
	VPBROADCASTB x, y

// func pow2Scales32(dst, s *byte, add, sub, lo, hi byte, n32 int) (clamped int)
//
// A scale byte's index into the 18 powers of two is (s + add - sub) held
// to [0, 17] by saturation and a minimum. From index 3 on, the E4M3 byte
// is (index - 2) << 3, an exponent field with a zero mantissa; below, a
// VPSHUFB finds the subnormals 0x01, 0x02 and 0x04, and the larger of the
// two is the byte. NaN is patched in, and a byte is counted as clamped
// where it is neither NaN nor within [lo, hi]. Each byte is written twice:
// VPERMQ orders the quadwords so that the in-lane unpacks leave 64 bytes in
// order.
TEXT ·pow2Scales32(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n32+24(FP), CX
	BROADCASTB(add+16(FP), X15, Y15)
	BROADCASTB(sub+17(FP), X14, Y14)
	BROADCASTB(lo+18(FP), X10, Y10)
	BROADCASTB(hi+19(FP), X9, Y9)
	BROADCAST32($0x11111111, AX, X13, Y13) // 17, the last index
	BROADCAST32($0x02020202, AX, X12, Y12)
	BROADCAST32($0x7f7f7f7f, AX, X7, Y7)   // E4M3 NaN
	VPCMPEQB Y8, Y8, Y8                    // E8M0 NaN, 0xFF
	MOVL     $0x00040201, AX               // the subnormals, zeros after
	MOVD     AX, X11
	VINSERTI128 $1, X11, Y11, Y11
	XORQ     BX, BX

loop:
	VMOVDQU   (SI), Y0
	VPADDUSB  Y15, Y0, Y1
	VPSUBUSB  Y14, Y1, Y1
	VPMINUB   Y13, Y1, Y1 // the index
	VPSUBUSB  Y12, Y1, Y2
	VPSLLW    $3, Y2, Y2  // (index - 2) << 3: no bit crosses a byte
	VPSHUFB   Y1, Y11, Y3
	VPMAXUB   Y3, Y2, Y2
	VPCMPEQB  Y8, Y0, Y4 // NaN
	VPBLENDVB Y4, Y7, Y2, Y2

	VPMINUB   Y9, Y0, Y5
	VPMAXUB   Y10, Y5, Y5
	VPCMPEQB  Y0, Y5, Y5 // within [lo, hi]
	VPOR      Y4, Y5, Y5
	VPMOVMSKB Y5, AX
	NOTL      AX
	POPCNTL   AX, AX
	ADDQ      AX, BX

	VPERMQ     $0xd8, Y2, Y2
	VPUNPCKLBW Y2, Y2, Y3
	VPUNPCKHBW Y2, Y2, Y2
	VMOVDQU    Y3, (DI)
	VMOVDQU    Y2, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop
	MOVQ BX, clamped+32(FP)
	VZEROUPPER
	RET

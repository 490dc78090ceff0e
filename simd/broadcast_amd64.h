// BROADCAST32 fills every doubleword of y with the 32-bit constant imm,
// through the general register r and x, y's low half: the byte masks and
// weights the AVX2 kernels keep in registers.
#define BROADCAST32(imm, r, x, y) \
	MOVL imm, r \
	MOVD r, x   \
	VPBROADCASTD x, y

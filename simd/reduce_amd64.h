// SUMQ adds the four quadwords of y into the low quadword of x, y's low
// half, through t: a kernel's 64-bit counting lanes summed.
#define SUMQ(y, x, t) \
	VEXTRACTI128 $1, y, t \
	VPADDQ       t, x, x  \
	VPSHUFD      $0x4e, x, t \
	VPADDQ       t, x, x

// FOLDB folds the 32 bytes of y with op (VPMAXUB, VPMINUB) into the low
// byte of x, y's low half, through t.
#define FOLDB(op, y, x, t) \
	VEXTRACTI128 $1, y, t \
	op           t, x, x  \
	VPSHUFD      $0x4e, x, t \
	op           t, x, x  \
	VPSHUFD      $0xb1, x, t \
	op           t, x, x  \
	VPSRLD       $16, x, t \
	op           t, x, x  \
	VPSRLD       $8, x, t \
	op           t, x, x

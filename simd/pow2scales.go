package simd

// Pow2Window is how many powers of two E4M3 holds exactly, 2^-9 to 2^8:
// the ratios Pow2ScalesE4M3 writes without clamping.
const Pow2Window = 18

// Pow2ScalesE4M3 writes, for each E8M0 scale byte s[i] (the power of two
// 2^(s[i]-127)), the E4M3 byte of 2^(s[i]-127-g) to dst[2i] and dst[2i+1]:
// an MXFP4 block's scale as the scales of its two NVFP4 halves under the
// global scale 2^g. Ratios outside [2^-9, 2^8] are clamped to the nearer
// end; the NaN byte 255 becomes E4M3's NaN, 0x7F. It returns how many
// bytes it clamped, NaN not counted. len(dst) must be 2*len(s).
func Pow2ScalesE4M3(dst, s []byte, g int) (clamped int) {
	if len(dst) != 2*len(s) {
		panic("simd: Pow2ScalesE4M3: dst is not twice as long as s")
	}
	// base is the byte whose ratio is 2^-9, the window's lower end.
	base := 127 + g - 9
	done, clamped := pow2ScalesVector(dst, s, base)
	return clamped + pow2ScalesGeneric(dst[2*done:], s[done:], base)
}

// e4m3Pow2 holds the E4M3 bytes of 2^-9 .. 2^8: three subnormals, then
// exponent fields 1 to 15 with a zero mantissa.
var e4m3Pow2 = [Pow2Window]byte{0x01, 0x02, 0x04, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30, 0x38, 0x40, 0x48, 0x50, 0x58, 0x60, 0x68, 0x70, 0x78}

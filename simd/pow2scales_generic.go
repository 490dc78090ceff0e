package simd

// pow2ScalesGeneric is Pow2ScalesE4M3 one byte at a time, base being the
// byte of ratio 2^-9.
func pow2ScalesGeneric(dst, s []byte, base int) (clamped int) {
	for i, b := range s {
		c := byte(0x7f)
		if b != 0xff {
			k := int(b) - base
			if k < 0 || k >= Pow2Window {
				clamped++
				k = min(max(k, 0), Pow2Window-1)
			}
			c = e4m3Pow2[k]
		}
		dst[2*i], dst[2*i+1] = c, c
	}
	return clamped
}

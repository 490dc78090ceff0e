// Portable block loops: the reference every architecture's kernel must
// match (see "Kernels per architecture" in simd.go), and what runs where
// there is none.

package simd

// maxLow7sGeneric sets dst[i] to MaxLow7 of block i of src.
func maxLow7sGeneric(dst, src []byte) {
	for i := range dst {
		dst[i] = MaxLow7((*[Block]byte)(src[Block*i:]))
	}
}

// packStepsGeneric codes block i of src with steps[sel[i]] and packs it
// into the 16 bytes of dst from 16i; it panics at a selector out of range.
func packStepsGeneric(dst, src []byte, steps []Steps, sel []byte) {
	for i, k := range sel {
		if int(k) >= len(steps) {
			panic("simd: PackSteps: selector out of range")
		}
		st := &steps[k]
		for j := range Block / 2 {
			dst[Block/2*i+j] = st.Code(src[Block*i+2*j]) | st.Code(src[Block*i+2*j+1])<<4
		}
	}
}

// rescaleE8M0Generic is RescaleE8M0 one block at a time.
func rescaleE8M0Generic(t, sel, top, s []byte, shifts *Shifts, bias byte) {
	for i, m := range top {
		m &= 0x7f
		switch {
		case m == 0x7f || s[i] == 0xff:
			t[i], sel[i] = 0xff, 0
		case m == 0:
			t[i], sel[i] = 1, 0
		default:
			v := byte(min(max(int(s[i])+int(shifts.Shift(m)), 1), 254))
			t[i], sel[i] = v, s[i]-v+bias
		}
	}
}

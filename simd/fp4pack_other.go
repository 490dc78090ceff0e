//go:build !amd64

package simd

// vectorSteps is false: this architecture has no block kernels. It is a
// variable, as on amd64, for the tests that clear it.
var vectorSteps = false

// maxLow7sVector does nothing: this architecture has no vector kernel.
func maxLow7sVector(dst, src []byte) int { return 0 }

// packStepsVector does nothing: this architecture has no vector kernel.
func packStepsVector(dst, src []byte, steps []Steps, sel []byte) int { return 0 }

// rescaleE8M0Vector does nothing: this architecture has no vector kernel.
func rescaleE8M0Vector(t, sel, top, s []byte, shifts *Shifts, bias byte) int { return 0 }

// pow2ScalesVector does nothing: this architecture has no vector kernel.
func pow2ScalesVector(dst, s []byte, base int) (done, clamped int) { return 0, 0 }

package deepseek2

import "math"

// yarnMScale is YaRN's attention temperature: 0.1 · m · ln(factor) + 1,
// and 1 for a factor of at most 1.
func yarnMScale(factor, m float64) float64 {
	if factor <= 1 {
		return 1
	}
	return 0.1*m*math.Log(factor) + 1
}

// InvFreq returns the rotary frequencies of the dim/2 pairs: θ^(-2i/dim),
// with YaRN's correction when c.YaRN is set. It follows the reference in
// float32 (both model.py and HF build the table as float32 tensors), so the
// frequencies are the ones the reference rotates by.
func (c *Config) InvFreq() []float32 {
	dim := c.QKRope
	half := dim / 2
	out := make([]float32, half)
	base := float32(c.RopeTheta)
	for i := range half {
		// torch: 1 / base ** (arange(0, dim, 2, float32) / dim)
		e := float32(2*i) / float32(dim)
		out[i] = 1 / float32(math.Pow(float64(base), float64(e)))
	}
	y := c.YaRN
	if y == nil {
		return out
	}
	low, high := YaRNCorrectionRange(y.BetaFast, y.BetaSlow, dim, float64(c.RopeTheta), y.OrigMaxPos)
	if low == high {
		high += 0.001
	}
	factor := float32(y.Factor)
	for i := range half {
		// HF: inv_freq = freq_inter·(1 - mask) + freq_extra·mask with
		// mask = 1 - ramp; model.py writes the same blend.
		ramp := (float32(i) - float32(low)) / (float32(high) - float32(low))
		ramp = min(max(ramp, 0), 1)
		mask := 1 - ramp
		extra := out[i]
		inter := 1 / (factor * float32(math.Pow(float64(base), float64(float32(2*i)/float32(dim)))))
		out[i] = inter*(1-mask) + extra*mask
	}
	return out
}

// YaRNCorrectionRange is the range of pair indices over which YaRN blends
// interpolated and original frequencies (V2, V3 and V4 alike).
func YaRNCorrectionRange(betaFast, betaSlow float64, dim int, base float64, origMaxPos int) (float64, float64) {
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(origMaxPos)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low := math.Floor(corr(betaFast))
	high := math.Ceil(corr(betaSlow))
	return max(low, 0), min(high, float64(dim-1))
}

// RopeScale is the factor HF applies to cos and sin: yarn_get_mscale(factor,
// mscale) / yarn_get_mscale(factor, mscale_all_dim). It is 1 for every
// released model (the two are equal); model.py has no such factor.
func (c *Config) RopeScale() float64 {
	if c.YaRN == nil {
		return 1
	}
	return yarnMScale(c.YaRN.Factor, c.YaRN.MScale) / yarnMScale(c.YaRN.Factor, c.YaRN.MScaleAllDim)
}

// RopeTables returns cos and sin [len(pos), QKRope/2] for the given token
// positions. The angle is pos·freq rounded to float32, as torch.outer
// computes it, then cos and sin are taken in float64 and rounded.
func (c *Config) RopeTables(pos []int) (cos, sin []float32) {
	freq := c.InvFreq()
	half := len(freq)
	scale := c.RopeScale()
	cos = make([]float32, len(pos)*half)
	sin = make([]float32, len(pos)*half)
	for r, p := range pos {
		for i, f := range freq {
			a := float64(float32(p) * f)
			cos[r*half+i] = float32(math.Cos(a) * scale)
			sin[r*half+i] = float32(math.Sin(a) * scale)
		}
	}
	return cos, sin
}

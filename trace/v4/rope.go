package v4

import (
	"math"

	"github.com/dsfs/dsfs/trace/deepseek2"
)

// InvFreq returns the rotary frequencies of layer l's rope_head_dim/2
// pairs, as model.py's precompute_freqs_cis builds them in float32:
// θ^(-2i/dim) with θ = rope_theta and no YaRN for sliding-window layers,
// θ = compress_rope_theta with YaRN's ramp (when original_seq_len > 0)
// for compressed layers.
func (c *Config) InvFreq(l int) []float32 {
	theta, orig := c.RopeTheta, 0
	if c.Ratio(l) > 0 {
		theta, orig = c.CompressRopeTheta, c.OrigSeqLen
	}
	dim := c.RopeDim
	half := dim / 2
	freqs := make([]float32, half)
	for i := range half {
		e := float32(2*i) / float32(dim)
		freqs[i] = 1 / float32(math.Pow(theta, float64(e)))
	}
	if orig <= 0 {
		return freqs
	}
	low, high := deepseek2.YaRNCorrectionRange(c.BetaFast, c.BetaSlow, dim, theta, orig)
	if low == high {
		high += 0.001
	}
	factor := float32(c.RopeFactor)
	for i, f := range freqs {
		ramp := (float32(i) - float32(low)) / (float32(high) - float32(low))
		ramp = min(max(ramp, 0), 1)
		smooth := 1 - ramp
		freqs[i] = f/factor*(1-smooth) + f*smooth
	}
	return freqs
}

// rope holds cos and sin [positions, pairs] of one layer's frequencies.
type rope struct {
	half     int
	cos, sin []float32
}

// newRope tabulates positions 0..n-1: the angle is pos·freq in float32,
// as torch.outer computes it.
func newRope(freqs []float32, n int) *rope {
	h := len(freqs)
	r := &rope{half: h, cos: make([]float32, n*h), sin: make([]float32, n*h)}
	for p := range n {
		for i, f := range freqs {
			a := float64(float32(p) * f)
			r.cos[p*h+i] = float32(math.Cos(a))
			r.sin[p*h+i] = float32(math.Sin(a))
		}
	}
	return r
}

// apply rotates the consecutive pairs of x (2·half values) by position
// pos; inverse rotates by the conjugate, as apply_rotary_emb(inverse).
func (r *rope) apply(x []float32, pos int, inverse bool) {
	c, s := r.cos[pos*r.half:(pos+1)*r.half], r.sin[pos*r.half:(pos+1)*r.half]
	for i := range r.half {
		a, b := x[2*i], x[2*i+1]
		sn := s[i]
		if inverse {
			sn = -sn
		}
		x[2*i] = a*c[i] - b*sn
		x[2*i+1] = a*sn + b*c[i]
	}
}

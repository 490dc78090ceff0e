package trace

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
)

// Num is a float written to JSON as a number, or null when it is NaN or
// infinite (JSON has no such numbers; Python would write NaN, which strict
// parsers refuse).
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// quantile is torch.quantile's default (linear interpolation between the
// two nearest ranks) of v, which it sorts; NaN when v is empty or holds a
// NaN, as torch gives.
func quantile(v []float64, q float64) Num {
	if len(v) == 0 {
		return Num(math.NaN())
	}
	if slices.ContainsFunc(v, math.IsNaN) {
		return Num(math.NaN())
	}
	slices.Sort(v)
	pos := q * float64(len(v)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(v)-1)
	return Num(v[lo] + (v[hi]-v[lo])*(pos-float64(lo)))
}

func mean(v []float64) Num {
	if len(v) == 0 {
		return Num(math.NaN())
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return Num(s / float64(len(v)))
}

// Spread is a mean with percentiles.
type Spread struct {
	Mean Num  `json:"mean"`
	P10  *Num `json:"p10,omitempty"` // only where the seed reports it
	P50  Num  `json:"p50"`
	P90  Num  `json:"p90"`
}

// SpreadOf is the spread of v (which it sorts), with the 10th percentile
// where p10 is set.
func SpreadOf(v []float64, p10 bool) Spread {
	s := Spread{Mean: mean(v)}
	if p10 {
		q := quantile(v, 0.1)
		s.P10 = &q
	}
	s.P50, s.P90 = quantile(v, 0.5), quantile(v, 0.9)
	return s
}

// HiddenStats describes residual-stream rows, as the seed's hidden_stats.
type HiddenStats struct {
	ValidTokens int    `json:"valid_tokens"`
	HiddenRMS   Spread `json:"hidden_rms"`
	L2Norm      Spread `json:"l2_norm"`
	Finite      bool   `json:"finite"`
	// SHA256FP32 is the SHA-256 of the rows as little-endian float32, in
	// prompt order.
	SHA256FP32 string `json:"sha256_fp32"`
}

// HiddenOf describes the rows of h, width d.
func HiddenOf(h []float32, d int) HiddenStats {
	n := len(h) / d
	rms := make([]float64, n)
	l2 := make([]float64, n)
	finite := true
	sum := sha256.New()
	buf := make([]byte, 4*d)
	for r := range n {
		var ss float64
		for j, x := range h[r*d : (r+1)*d] {
			f := float64(x)
			ss += f * f
			finite = finite && !math.IsNaN(f) && !math.IsInf(f, 0)
			binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(x))
		}
		sum.Write(buf)
		rms[r] = math.Sqrt(ss / float64(d))
		l2[r] = math.Sqrt(ss)
	}
	return HiddenStats{
		ValidTokens: n,
		HiddenRMS:   SpreadOf(rms, true),
		L2Norm:      SpreadOf(l2, true),
		Finite:      finite,
		SHA256FP32:  hex.EncodeToString(sum.Sum(nil)),
	}
}

// RMS is the root mean square of the values of columns [c0, c0+w) of the
// rows of m (width d).
func RMS(m []float32, d, c0, w int) Num {
	var ss float64
	n := 0
	for r := 0; r+d <= len(m); r += d {
		for _, x := range m[r+c0 : r+c0+w] {
			ss += float64(x) * float64(x)
			n++
		}
	}
	if n == 0 {
		return Num(math.NaN())
	}
	return Num(math.Sqrt(ss / float64(n)))
}

// LoadMetrics describes how routes spread over experts, as the seed's
// load_metrics.
type LoadMetrics struct {
	Routes           int `json:"routes"`
	UsedExperts      int `json:"used_experts"`
	ZeroExperts      int `json:"zero_experts"`
	Mean             Num `json:"mean"`
	Std              Num `json:"std"` // sample (n-1) standard deviation, as torch.std
	CV               Num `json:"cv"`
	Gini             Num `json:"gini"`
	EntropyNats      Num `json:"entropy_nats"`
	EffectiveExperts Num `json:"effective_experts"`
	Min              Num `json:"min"`
	P50              Num `json:"p50"`
	P90              Num `json:"p90"`
	Max              Num `json:"max"`
}

// loadMetrics describes a load of routes per expert.
func loadMetrics(load []int) LoadMetrics {
	n := len(load)
	v := make([]float64, n)
	var total float64
	m := LoadMetrics{}
	for i, x := range load {
		v[i] = float64(x)
		total += v[i]
		if x > 0 {
			m.UsedExperts++
		} else {
			m.ZeroExperts++
		}
	}
	m.Routes = int(total)
	mu := total / float64(n)
	m.Mean = Num(mu)
	var ss float64
	for _, x := range v {
		ss += (x - mu) * (x - mu)
	}
	std := math.NaN()
	if n > 1 {
		std = math.Sqrt(ss / float64(n-1))
	}
	m.Std = Num(std)
	if mu != 0 {
		m.CV = Num(std / mu)
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	if den := float64(n) * total; den != 0 {
		var g float64
		for i, x := range sorted {
			g += float64(2*(i+1)-n-1) * x
		}
		m.Gini = Num(g / den)
	}
	var h float64
	for _, x := range v {
		if x > 0 {
			p := x / math.Max(total, 1)
			h -= p * math.Log(p)
		}
	}
	m.EntropyNats = Num(h)
	m.EffectiveExperts = Num(math.Exp(h))
	m.Min, m.Max = Num(sorted[0]), Num(sorted[n-1])
	m.P50, m.P90 = quantile(sorted, 0.5), quantile(sorted, 0.9)
	return m
}

// Float64s widens v.
func Float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

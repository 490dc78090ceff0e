package inventory

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
)

// Summary is the seed's summary of a set of records. Fields computed from
// values are null when the records were not read (NoHash).
type Summary struct {
	CountByFormat map[string]int64 `json:"count_by_format"` // by Record.Official
	BytesByFormat map[string]int64 `json:"bytes_by_format"`
	// Problems lists [tensor, kind] with the seed's kinds: nbytes,
	// nonfinite, nan, scale shape; and unreadable.
	Problems [][2]string `json:"problems"`
	// ScaleExponentRangeByGroup is [min, max] exponent of the E8M0 tensors
	// by name with mtp.M. and experts.E. generalised to mtp.S. and
	// experts.N.
	ScaleExponentRangeByGroup map[string][2]int `json:"scale_exponent_range_by_group"`
	// FP4CodeHistByGroup sums the MXFP4 code histograms by name with
	// experts.E. generalised to experts.N.
	FP4CodeHistByGroup   map[string][]int64 `json:"fp4_code_hist_by_group"`
	DecodedAllExactBF16  *bool              `json:"decoded_all_exact_bf16"`
	DecodedAllExactFP16  *bool              `json:"decoded_all_exact_fp16"`
	DecodedNotExactFP16  []string           `json:"decoded_not_exact_fp16"` // the first 50
	DecodedAbsMax        *float64           `json:"decoded_absmax"`
	DecodedMinNonzeroAbs *float64           `json:"decoded_min_nonzero_abs"`
	// RouterBiasF32 says every router bias is F32.
	RouterBiasF32 bool `json:"router_bias_f32"`
}

// maxNotExact is how many names DecodedNotExactFP16 lists.
const maxNotExact = 50

// Summarize computes the seed's summary of recs.
func Summarize(recs []Record) Summary {
	s := Summary{
		CountByFormat: map[string]int64{}, BytesByFormat: map[string]int64{}, Problems: [][2]string{},
		ScaleExponentRangeByGroup: map[string][2]int{}, FP4CodeHistByGroup: map[string][]int64{},
		DecodedNotExactFP16: []string{}, RouterBiasF32: true,
	}
	allBF16, allFP16, decoded := true, true, false
	for i := range recs {
		r := &recs[i]
		s.CountByFormat[r.Official]++
		s.BytesByFormat[r.Official] += r.NBytes
		for _, kind := range problemKinds(r) {
			s.Problems = append(s.Problems, [2]string{r.Name, kind})
		}
		if isRouterBias(r.Name) && r.DType != "F32" {
			s.RouterBiasF32 = false
		}
		if r.Values == nil {
			continue
		}
		if sc := r.Values.Scale; sc != nil && r.Official == "e8m0" && sc.ExpMin != nil {
			g := generalise(r.Name, true)
			lo, hi := *sc.ExpMin, *sc.ExpMax
			if old, ok := s.ScaleExponentRangeByGroup[g]; ok {
				lo, hi = min(lo, old[0]), max(hi, old[1])
			}
			s.ScaleExponentRangeByGroup[g] = [2]int{lo, hi}
		}
		p := r.Values.Pair
		if p == nil || p.Decoded == nil {
			continue
		}
		if r.Official == "mxfp4" {
			g := generalise(r.Name, false)
			h := s.FP4CodeHistByGroup[g]
			if h == nil {
				h = make([]int64, len(p.CodeHist))
				s.FP4CodeHistByGroup[g] = h
			}
			for c, n := range p.CodeHist {
				h[c] += n
			}
		}
		d := p.Decoded
		decoded = true
		allBF16 = allBF16 && d.ExactBF16
		allFP16 = allFP16 && d.ExactFP16
		if !d.ExactFP16 && len(s.DecodedNotExactFP16) < maxNotExact {
			s.DecodedNotExactFP16 = append(s.DecodedNotExactFP16, r.Name)
		}
		if d.AbsMax != nil && (s.DecodedAbsMax == nil || *d.AbsMax > *s.DecodedAbsMax) {
			s.DecodedAbsMax = ptr(*d.AbsMax)
		}
		if d.MinNonzeroAbs != nil && (s.DecodedMinNonzeroAbs == nil || *d.MinNonzeroAbs < *s.DecodedMinNonzeroAbs) {
			s.DecodedMinNonzeroAbs = ptr(*d.MinNonzeroAbs)
		}
	}
	if decoded {
		s.DecodedAllExactBF16, s.DecodedAllExactFP16 = ptr(allBF16), ptr(allFP16)
	}
	return s
}

// isRouterBias matches the MoE router's bias in DeepSeek-V4 and Hugging
// Face names.
func isRouterBias(name string) bool {
	return strings.HasSuffix(name, ".gate.bias") || strings.HasSuffix(name, ".gate.bias_vl") ||
		strings.HasSuffix(name, ".gate.e_score_correction_bias")
}

// generalise replaces the expert number of a name by N and, with mtp, a
// leading mtp.M by mtp.S, as the seed groups names.
func generalise(name string, mtp bool) string {
	c := strings.Split(name, ".")
	if mtp && len(c) > 2 && c[0] == "mtp" && digits(c[1]) {
		c[1] = "S"
	}
	for i := 0; i+2 < len(c); i++ {
		if c[i] == "experts" && digits(c[i+1]) {
			c[i+1] = "N"
		}
	}
	return strings.Join(c, ".")
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// problemKinds lists the seed's problem kinds of a record.
func problemKinds(r *Record) []string {
	var kinds []string
	if !r.NBytesOK {
		kinds = append(kinds, "nbytes")
	}
	if r.Error != "" {
		kinds = append(kinds, "unreadable")
	}
	if r.Values == nil {
		return kinds
	}
	v := r.Values
	if (v.Float != nil && v.Float.NonFinite > 0) || (v.Pair != nil && v.Pair.Decoded != nil && v.Pair.Decoded.NonFinite > 0) {
		kinds = append(kinds, "nonfinite")
	}
	if (v.Scale != nil && v.Scale.NaN > 0) || (v.Pair != nil && v.Pair.NaNCodes != nil && *v.Pair.NaNCodes > 0) {
		kinds = append(kinds, "nan")
	}
	if v.Pair != nil && !v.Pair.ShapeOK {
		kinds = append(kinds, "scale shape")
	}
	return kinds
}

// Problems lists what is wrong with each record, one line per fault,
// with the tensor's name: wrong byte counts, unreadable data, non-finite
// values, NaN scales or codes, scales that do not fit, and quantised
// weights with no scale at all.
func Problems(recs []Record) []checkpoint.Problem {
	var out []checkpoint.Problem
	add := func(r *Record, format string, args ...any) {
		out = append(out, checkpoint.Problem{File: r.File, Tensor: r.Name, Reason: fmt.Sprintf(format, args...)})
	}
	for i := range recs {
		r := &recs[i]
		if !r.NBytesOK {
			add(r, "%d bytes of data do not match %s %v", r.NBytes, r.DType, r.Shape)
		}
		if r.Error != "" {
			add(r, "unreadable: %s", r.Error)
		}
		if r.Scale == "" && (r.DType == "I8" || r.DType == "F8_E4M3") && strings.HasSuffix(r.Name, ".weight") {
			add(r, "a %s weight with no scale tensor: its values cannot be decoded", r.DType)
		}
		if r.Values == nil {
			continue
		}
		switch v := r.Values; {
		case v.Float != nil && v.Float.NonFinite > 0:
			add(r, "%d of %d values are not finite", v.Float.NonFinite, v.Float.N)
		case v.Scale != nil && v.Scale.NaN > 0:
			add(r, "%d of %d scales are NaN (E8M0 byte 255)", v.Scale.NaN, v.Scale.N)
		case v.Pair != nil && !v.Pair.ShapeOK:
			add(r, "its scale %s does not fit its shape %v", r.Scale, r.Shape)
		case v.Pair != nil:
			if v.Pair.NaNCodes != nil && *v.Pair.NaNCodes > 0 {
				add(r, "%d E4M3 codes are NaN (0x7F or 0xFF)", *v.Pair.NaNCodes)
			}
			if d := v.Pair.Decoded; d != nil && d.NonFinite > 0 {
				add(r, "%d decoded values are not finite (NaN scales or codes, or overflow)", d.NonFinite)
			}
		}
	}
	return out
}

// sortProblems orders problems as the catalog does: by file, then tensor.
func sortProblems(ps []checkpoint.Problem) {
	slices.SortStableFunc(ps, func(a, b checkpoint.Problem) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return strings.Compare(a.Tensor, b.Tensor)
	})
}

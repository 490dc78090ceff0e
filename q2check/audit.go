package q2check

import (
	"context"
	"math"
	"sort"
	"strconv"
	"sync"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/q2"
	"golang.org/x/sync/errgroup"
)

// AuditTensor is the fidelity of one quantised tensor.
type AuditTensor struct {
	Name       string `json:"name"`
	Projection string `json:"projection"`
	GGMLType   string `json:"ggml_type"`
	Weights    int64  `json:"weights"`
	NonFinite  int64  `json:"non_finite"` // weights left out (NaN or infinite)
	Cosine     Ratio  `json:"cosine"`
	RelRMS     Ratio  `json:"rel_rms"`
}

// Ratio is a figure that is undefined (JSON null) for an all-zero tensor.
type Ratio float64

// MarshalJSON writes NaN and infinities as null.
func (r Ratio) MarshalJSON() ([]byte, error) {
	f := float64(r)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// AuditProjection sums up one projection (w1, w2, w3). Cosine and RelRMS
// are over all its audited weights together; the per-tensor mean, min and
// max (over the tensors where they are defined) say how much they vary.
type AuditProjection struct {
	Projection string `json:"projection"`
	GGMLType   string `json:"ggml_type"`
	Tensors    int    `json:"tensors"`
	Weights    int64  `json:"weights"`
	NonFinite  int64  `json:"non_finite"`
	Cosine     Ratio  `json:"cosine"`
	RelRMS     Ratio  `json:"rel_rms"`
	MeanCosine Ratio  `json:"mean_cosine"`
	MinCosine  Ratio  `json:"min_cosine"`
	MeanRelRMS Ratio  `json:"mean_rel_rms"`
	MaxRelRMS  Ratio  `json:"max_rel_rms"`
	defined    int
}

// AuditReport is audit.json.
type AuditReport struct {
	Source       string `json:"source"`
	Revision     string `json:"source_revision"`
	Quantiser    string `json:"quantiser"`
	Dequantiser  string `json:"dequantiser"`
	Reference    string `json:"reference"`
	CodecVersion string `json:"codec_version"`
	// Sample is the number of tensors audited per projection (0: all).
	Sample      int               `json:"sample"`
	Tensors     int               `json:"tensors_audited"`
	Available   int               `json:"tensors_quantised"`
	Projections []AuditProjection `json:"projections"`
	PerTensor   []AuditTensor     `json:"tensors"`
}

// sums accumulates the float64 sums cosine and relative RMS need.
type sums struct {
	ab, aa, bb, dd float64
	n, nonFinite   int64
}

func (s *sums) add(o sums) {
	s.ab += o.ab
	s.aa += o.aa
	s.bb += o.bb
	s.dd += o.dd
	s.n += o.n
	s.nonFinite += o.nonFinite
}

// cosine and relRMS are NaN where undefined (an all-zero tensor).
func (s sums) cosine() float64 { return s.ab / math.Sqrt(s.aa*s.bb) }
func (s sums) relRMS() float64 { return math.Sqrt(s.dd / s.aa) }

// Audit dequantises the blocks of sample quantised tensors per projection
// (all when sample is 0; otherwise spread evenly over the checkpoint) and
// compares them with the exact MXFP4 decode of their source. The blocks
// come through the view's own path, so a disk cache q was planned with
// serves them. progress counts weights.
func Audit(ctx context.Context, q *q2.Plan, sample int, progress Progress) (*AuditReport, error) {
	byProj := make(map[string][]*q2.Tensor)
	all := q.Quantised()
	for _, t := range all {
		byProj[t.Source.Proj] = append(byProj[t.Source.Proj], t)
	}
	projs := make([]string, 0, len(byProj))
	for p := range byProj {
		projs = append(projs, p)
	}
	sort.Strings(projs)
	var picked []*q2.Tensor
	for _, p := range projs {
		ts := byProj[p]
		if sample <= 0 || sample >= len(ts) {
			picked = append(picked, ts...)
			continue
		}
		for i := range sample {
			picked = append(picked, ts[i*len(ts)/sample])
		}
	}
	var total int64
	for _, t := range picked {
		total += t.Rows() * t.In()
	}

	results := make([]sums, len(picked))
	var mu sync.Mutex
	var done int64
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(2) // each block already spreads over every core
	for k, t := range picked {
		eg.Go(func() error {
			buf := make([]byte, t.Blocks.BlockLen)
			for i := range t.Blocks.Count() {
				lo, hi := t.BlockRows(i)
				p := buf[:(hi-lo)*t.RowBytes()]
				if err := t.Blocks.Compute(ctx, i, p); err != nil {
					return err
				}
				w, sc, err := t.ReadSource(lo, hi)
				if err != nil {
					return err
				}
				n := (hi - lo) * t.In()
				exact := make([]float32, n)
				got := make([]float32, n)
				codecs.DecodeMXFP4(exact, w, sc)
				t.Type.Dequantise(got, p)
				results[k].add(compare(exact, got))
				if progress != nil {
					mu.Lock()
					done += n
					progress(done, total)
					mu.Unlock()
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}

	r := &AuditReport{Source: q.Repo, Revision: q.Revision, Quantiser: q2.Quantiser,
		Dequantiser: "Go ports of ggml's dequantize_row_iq2_xxs and dequantize_row_q2_K",
		Reference:   "exact MXFP4 decode (E2M1 x 2^(e-127), float32)", CodecVersion: codecs.Version,
		Sample: sample, Tensors: len(picked), Available: len(all),
		Projections: []AuditProjection{}, PerTensor: make([]AuditTensor, len(picked))}
	agg := make(map[string]*AuditProjection)
	tot := make(map[string]*sums)
	for k, t := range picked {
		s := results[k]
		cos, rel := s.cosine(), s.relRMS()
		at := AuditTensor{Name: t.Name, Projection: t.Source.Proj, GGMLType: t.Type.Name, Weights: s.n,
			NonFinite: s.nonFinite, Cosine: Ratio(cos), RelRMS: Ratio(rel)}
		r.PerTensor[k] = at
		a := agg[at.Projection]
		if a == nil {
			a = &AuditProjection{Projection: at.Projection, GGMLType: at.GGMLType, MinCosine: Ratio(math.Inf(1))}
			agg[at.Projection] = a
			tot[at.Projection] = &sums{}
		}
		tot[at.Projection].add(s)
		a.Tensors++
		if math.IsNaN(cos) || math.IsNaN(rel) {
			continue
		}
		a.defined++
		a.MeanCosine += Ratio(cos)
		a.MinCosine = min(a.MinCosine, Ratio(cos))
		a.MeanRelRMS += Ratio(rel)
		a.MaxRelRMS = max(a.MaxRelRMS, Ratio(rel))
	}
	for _, p := range projs {
		a := agg[p]
		if a == nil {
			continue
		}
		s := tot[p]
		a.Weights, a.NonFinite = s.n, s.nonFinite
		a.Cosine, a.RelRMS = Ratio(s.cosine()), Ratio(s.relRMS())
		a.MeanCosine /= Ratio(a.defined) // NaN when no tensor is defined, as it should be
		a.MeanRelRMS /= Ratio(a.defined)
		if a.defined == 0 {
			a.MinCosine, a.MaxRelRMS = Ratio(math.NaN()), Ratio(math.NaN())
		}
		r.Projections = append(r.Projections, *a)
	}
	return r, nil
}

// compare sums the products of exact (the reference) and got, leaving out
// weights whose reference or result is not finite.
func compare(exact, got []float32) sums {
	var s sums
	for i, a32 := range exact {
		a, b := float64(a32), float64(got[i])
		if math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(b) || math.IsInf(b, 0) {
			s.nonFinite++
			continue
		}
		d := a - b
		s.ab += a * b
		s.aa += a * a
		s.bb += b * b
		s.dd += d * d
		s.n++
	}
	return s
}

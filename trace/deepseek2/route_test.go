package deepseek2

import (
	"context"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/trace/backend"
	"math"
	"slices"
	"testing"
)

func TestNormalise(t *testing.T) {
	w := []float32{0.3, 0.1}
	tests := []struct {
		name string
		cfg  Config
		want []float32
	}{
		{"v2 raw, scaled", Config{Family: checkpoint.DeepSeekV2, TopK: 2, RoutedScale: 2}, []float32{0.6, 0.2}},
		{"v2 normalised, not scaled", Config{Family: checkpoint.DeepSeekV2, TopK: 2, NormTopKProb: true, RoutedScale: 2}, []float32{0.75, 0.25}},
		{"v2 top-1 is never normalised", Config{Family: checkpoint.DeepSeekV2, TopK: 1, NormTopKProb: true, RoutedScale: 2}, []float32{0.6, 0.2}},
		{"v3 normalised and scaled", Config{Family: checkpoint.DeepSeekV3, TopK: 2, NormTopKProb: true, RoutedScale: 2}, []float32{1.5, 0.5}},
		{"v3 raw, scaled", Config{Family: checkpoint.DeepSeekV3, TopK: 2, RoutedScale: 2}, []float32{0.6, 0.2}},
		{"model.py softmax", Config{ScoringFunc: ScoreSoftmax, TopK: 2, NormTopKProb: true, RoutedScale: 2}, []float32{0.6, 0.2}},
		{"model.py sigmoid", Config{ScoringFunc: ScoreSigmoid, TopK: 2, RoutedScale: 2}, []float32{1.5, 0.5}},
	}
	for _, tt := range tests {
		got := slices.Clone(w)
		tt.cfg.normalise(got)
		for i := range got {
			if math.Abs(float64(got[i]-tt.want[i])) > 1e-6 {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
				break
			}
		}
	}
}

// TestGroupLimit routes one token over 4 groups of 2 experts with biases
// that make every allowed score negative: experts of dropped groups must
// still never be chosen (model.py's -inf; HF's 0 fill would pick them).
func TestGroupLimit(t *testing.T) {
	cfg := &Config{RoutedExperts: 8, TopK: 2, Groups: 4, TopKGroups: 1, ScoringFunc: ScoreSigmoid,
		TopKMethod: TopKNoAuxTC, Family: checkpoint.DeepSeekV3, NormTopKProb: true, RoutedScale: 1}
	logits := []float32{0, 0, 0, 0, 3, 2, 0, 0} // sigmoid: 0.5 … 0.95, 0.88
	bias := []float32{-5, -5, -5, -5, -1, -1.5, -5, -5}
	r := cfg.route(logits, bias)
	if !slices.Equal(r.IDs, []int32{4, 5}) {
		t.Fatalf("experts %v, want [4 5] from the one allowed group", r.IDs)
	}
	// Weights come from the unbiased scores, renormalised.
	s4, s5 := 1/(1+math.Exp(-3)), 1/(1+math.Exp(-2))
	if math.Abs(float64(r.Weights[0])-s4/(s4+s5)) > 1e-6 {
		t.Errorf("weights %v", r.Weights)
	}
	// The group margin: group 2 scores s4-1 + s5-1.5, the next group 2·(0.5-5).
	want := (s4 - 1 + s5 - 1.5) - 2*(0.5-5)
	if math.Abs(float64(r.Margin[0])-want) > 1e-5 {
		t.Errorf("margin %g, want %g", r.Margin[0], want)
	}
}

// routingCPU is the CPU backend as a Router: it routes on the host through
// the same code, counting the calls.
type routingCPU struct {
	*backend.CPU
	calls int
}

func (r *routingCPU) Route(logits backend.Mat, bias backend.Buffer, cfg *Config) (Routes, error) {
	r.calls++
	host := make([]float32, logits.Rows*logits.Cols)
	r.Download(host, logits.Buf, 0)
	var b []float32
	if bias != nil {
		b = make([]float32, bias.Len())
		r.Download(b, bias, 0)
	}
	return cfg.route(host, b), nil
}

// TestRouterBackend checks that a backend which routes is asked to, and
// that the bias reaches it.
func TestRouterBackend(t *testing.T) {
	m, g := loadGolden(t, "v3-tiny")
	var h []float32
	var lens []int
	for _, s := range g.Sequences {
		h = append(h, s.Embed.f32...)
		lens = append(lens, s.Length)
	}
	rb := &routingCPU{CPU: backend.NewCPU()}
	for l := range m.Config.Layers {
		a, err := m.Forward(context.Background(), backend.NewCPU(), l, h, lens)
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.Forward(context.Background(), rb, l, h, lens)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.HiddenOut, b.HiddenOut) || (a.Routes == nil) != (b.Routes == nil) ||
			a.Routes != nil && !slices.Equal(a.Routes.IDs, b.Routes.IDs) {
			t.Fatalf("layer %d: routing on the backend changed the result", l)
		}
		h = a.HiddenOut
	}
	if rb.calls != m.Config.Layers-m.Config.DenseLayers {
		t.Errorf("%d Route calls for %d MoE layers", rb.calls, m.Config.Layers-m.Config.DenseLayers)
	}
}

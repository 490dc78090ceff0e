package trace

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/figures"
)

// figureTracer is a tracer of three layers whose first is dense: only
// what the figures read.
type figureTracer struct {
	Tracer
	prompts []Prompt
	routes  []*RoutingTrace // per layer; nil for a dense one
	fail    error
}

func (f *figureTracer) Layers() int                    { return len(f.routes) }
func (f *figureTracer) Prompts() []Prompt              { return f.prompts }
func (f *figureTracer) PromptsJSON() ([]byte, error)   { return encode(f.prompts) }
func (f *figureTracer) LogitActivations() []Activation { return nil }
func (f *figureTracer) Routing(_ context.Context, l int) (*RoutingTrace, error) {
	return f.routes[l], f.fail
}
func (f *figureTracer) Activations(l int) []Activation {
	if f.routes[l] == nil {
		return []Activation{{Kind: "hidden_out"}}
	}
	return []Activation{{Kind: "hidden_out"}, {Kind: "topk_ids"}}
}

// newFigureTracer routes two prompts (of 2 and 3 tokens, 2 experts each
// of 4) through a dense layer and two MoE layers.
func newFigureTracer() *figureTracer {
	prompts := []Prompt{{ID: "a", TokenIDs: []int{7, 8}}, {ID: "b", TokenIDs: []int{9, 10, 11}}}
	layer := func(ids []int32, weights []float32) *RoutingTrace {
		return Routing(prompts, nil, 4, Routes{K: 2, IDs: ids, Weights: weights, Margin: make([]float32, 5)})
	}
	return &figureTracer{prompts: prompts, routes: []*RoutingTrace{
		nil,
		layer([]int32{0, 1, 2, 3, 1, 2, 3, 0, 0, 2}, []float32{0.9, 0.1, 0.2, 0.8, 0.5, 0.5, 0.3, 0.7, 0.6, 0.4}),
		layer([]int32{3, 2, 1, 0, 2, 3, 0, 1, 1, 3}, []float32{0.6, 0.4, 0.4, 0.6, 0.9, 0.1, 0.5, 0.5, 0.2, 0.8}),
	}}
}

// TestRouteMap checks what a route map is drawn from: per layer the
// expert with the largest weight (the router's first on a tie), the dense
// layer's row empty.
func TestRouteMap(t *testing.T) {
	tr := newFigureTracer()
	got, err := routeMap(context.Background(), tr, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := figures.RouteMap{
		Title:   "b: the expert each token went to first, by layer",
		Tokens:  []figures.Token{{ID: 9}, {ID: 10}, {ID: 11}},
		Layers:  []int{0, 1, 2},
		Experts: 4,
		Top:     [][]int{{-1, -1, -1}, {1, 0, 0}, {2, 0, 3}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("route map of b:\n%+v\nwant\n%+v", got, want)
	}
	tr.fail = errors.New("layer 1: interrupted")
	if _, err := routeMapPNG(context.Background(), tr, 0); err == nil || !strings.Contains(err.Error(), "routes/a.png: layer 1: interrupted") {
		t.Errorf("a failed layer: %v", err)
	}
}

// TestLoadChart checks what a layer's load chart is drawn from: each
// prompt's routes per expert, and that a dense layer has none.
func TestLoadChart(t *testing.T) {
	tr := newFigureTracer()
	got, err := loadChart(context.Background(), tr, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := figures.Load{
		Title:   "layer 1: routes per expert, 2 prompts, 5 tokens, 2 experts per token",
		Experts: 4,
		Prompts: []figures.Series{{Name: "a", Counts: []int{1, 1, 1, 1}}, {Name: "b", Counts: []int{2, 1, 2, 1}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("load of layer 1:\n%+v\nwant\n%+v", got, want)
	}
	if _, err := loadPNG(context.Background(), tr, 0); err == nil || !strings.Contains(err.Error(), "layer 0 routes nothing") {
		t.Errorf("the dense layer's load chart: %v", err)
	}
}

// TestFigureFiles checks that Files lists a load chart for each routing
// layer and a route map per prompt, as documents.
func TestFigureFiles(t *testing.T) {
	files, err := Files(newFigureTracer(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f.Name, ".png") {
			if f.Doc == nil {
				t.Errorf("%s is not a document", f.Name)
			}
			names = append(names, f.Name)
		}
	}
	want := []string{"layers/01.load.png", "layers/02.load.png", "routes/a.png", "routes/b.png"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("figures %v, want %v", names, want)
	}
}

// TestCount checks the load charts' titles' counts.
func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 prompts"}, {1, "1 prompt"}, {4, "4 prompts"}} {
		if got := count(tc.n, "prompt"); got != tc.want {
			t.Errorf("count(%d): %q, want %q", tc.n, got, tc.want)
		}
	}
}

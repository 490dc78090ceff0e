package deepseek4

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/internal/v4tiny"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/internal/v4family"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// v4Golden is what these tests read of testdata/trace/v4-tiny/golden.json.
type v4Golden struct {
	Sequences []struct {
		TokenIDs []int `json:"token_ids"`
		Modes    map[string]struct {
			Layers []struct {
				StreamOut    v4tiny.Array  `json:"stream_out"`
				AttnOut      v4tiny.Array  `json:"attn_out"`
				CompressedKV *v4tiny.Array `json:"compressed_kv"`
				Indexer      *struct {
					TopK v4tiny.Array `json:"topk"`
				} `json:"indexer"`
				Route struct {
					IDs v4tiny.Array `json:"ids"`
				} `json:"route"`
			} `json:"layers"`
			Final struct {
				Logits v4tiny.Array `json:"logits"`
			} `json:"final"`
		} `json:"modes"`
	} `json:"sequences"`
}

// v4Tracer traces v4-tiny's two golden sequences as two prompts, run in
// one batch.
func v4Tracer(t *testing.T, p v4.Precision) (*core, *v4Golden) {
	t.Helper()
	var g v4Golden
	m := v4tiny.Open(t, testdata.TraceGolden(t, "v4-tiny", &g))
	tr, err := model{m}.Trace(v4tiny.TwoPrompts(t, g.Sequences[0].TokenIDs, g.Sequences[1].TokenIDs, m.Config.Vocab), trace.Options{Precision: string(p)})
	if err != nil {
		t.Fatal(err)
	}
	return tr.(*core), &g
}

// TestV4TracerGolden reads every layer's activations and the logits of
// both prompts, run together, in both precisions, against the golden
// chain. Reading in layer order runs each layer once, and the logits
// reuse the memoised last stream.
func TestV4TracerGolden(t *testing.T) {
	for _, p := range []v4.Precision{v4.A8, v4.FP32} {
		tr, g := v4Tracer(t, p)
		for l := range 5 {
			acts := tr.Activations(l)
			for _, a := range acts {
				gl := g.Sequences[a.Prompt].Modes[string(p)].Layers[l]
				b := v4tiny.ReadActivation(t, tr, l, a)
				switch a.Kind {
				case "stream_out":
					v4tiny.Within(t, a.Name, v4tiny.F32s(b), gl.StreamOut.Data)
				case "attn_out":
					v4tiny.Within(t, a.Name, v4tiny.F32s(b), gl.AttnOut.Data)
				case "compressed_kv":
					v4tiny.Within(t, a.Name, v4tiny.F32s(b), gl.CompressedKV.Data)
				case "indexer_topk":
					// The golden lists picks by score; the file ascending,
					// -1 last.
					want := v4tiny.I32s(gl.Indexer.TopK.Data)
					k := int(a.Shape[1])
					for r := 0; r < len(want); r += k {
						copy(want[r:r+k], v4family.AscendingPicks(want[r:r+k]))
					}
					if got := v4tiny.I32s(b); !slices.Equal(got, want) {
						t.Errorf("%s layer %d: %v, want %v", a.Name, l, got, want)
					}
				case "topk_ids":
					if got, want := v4tiny.I32s(b), v4tiny.I32s(gl.Route.IDs.Data); !slices.Equal(got, want) {
						t.Errorf("%s layer %d: %v, want %v", a.Name, l, got, want)
					}
				}
			}
			if _, err := tr.LayerJSON(context.Background(), l); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range tr.LogitActivations() {
			v4tiny.Within(t, string(p)+" "+a.Name, v4tiny.F32s(v4tiny.ReadActivation(t, tr, -1, a)), g.Sequences[a.Prompt].Modes[string(p)].Final.Logits.Data)
		}
		if n := tr.Forwards(); n != 5 {
			t.Errorf("%d forwards for 5 layers and the logits", n)
		}
		doc, err := tr.TraceJSON(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var d Report
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Precision != string(p) || len(d.Layers) != 5 || d.Configuration.HCMult != 4 || d.Reference != Reference {
			t.Errorf("trace.json: precision %q, %d layers, hc_mult %d, reference %q", d.Precision, len(d.Layers), d.Configuration.HCMult, d.Reference)
		}
	}
}

// TestV4Record checks the V4 facts of a layer record against the
// activations they summarise.
func TestV4Record(t *testing.T) {
	tr, _ := v4Tracer(t, v4.A8)
	out, r, err := tr.Layer(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Attention != "csa" || r.CompressRatio != 4 || !r.HashRouted || r.Precision != "a8" {
		t.Errorf("record header %+v", r)
	}
	if len(r.Indexer) != 2 || len(r.Keys) != 2 {
		t.Fatalf("%d indexer and %d key entries for 2 prompts", len(r.Indexer), len(r.Keys))
	}
	// Prompt 0 has 24 tokens: window keys 1..8 per query, and query t
	// sees min(4, (t+1)/4) compressed entries.
	wantWindow, wantComp := 0, 0
	for q := range 24 {
		wantWindow += min(q+1, 8)
		wantComp += min(4, (q+1)/4)
	}
	if k := r.Keys[0]; k.Window != wantWindow || k.Compressed != wantComp || k.CompressedEntries != 6 {
		t.Errorf("keys %+v, want window %d compressed %d entries 6", k, wantWindow, wantComp)
	}
	tok := r.Indexer[0].Tokens[23]
	if !slices.IsSorted(tok.Picks) || len(tok.Picks) != 4 {
		t.Errorf("picks of the last token %v", tok.Picks)
	}
	if r.Routing == nil || len(r.Routing.PerPrompt) != 2 || r.Routing.RouteMargin.Mean != trace.Num(math.Inf(1)) {
		t.Errorf("hash layer routing %+v", r.Routing)
	}
	if out.ExpertsRun != r.RoutedExpertsRun {
		t.Errorf("experts run %d, record %d", out.ExpertsRun, r.RoutedExpertsRun)
	}
	// Names and shapes of the layer's file.
	want := map[string][]int64{
		"s0.stream_out": {24, 4, 128}, "s0.attn_out": {24, 128}, "s0.ffn_out": {24, 128},
		"s0.compressed_kv": {6, 128}, "s0.indexer_topk": {24, 4}, "s0.topk_ids": {24, 4}, "s0.topk_weights": {24, 4},
	}
	for _, a := range tr.Activations(2) {
		if s, ok := want[a.Name]; ok && !slices.Equal(a.Shape, s) {
			t.Errorf("%s: shape %v, want %v", a.Name, a.Shape, s)
		}
		if (a.Kind == "topk_ids" || a.Kind == "indexer_topk") != (a.DType == safetensors.I32) {
			t.Errorf("%s: dtype %s", a.Name, a.DType)
		}
		delete(want, a.Name)
	}
	if len(want) != 0 {
		t.Errorf("missing %v", want)
	}
}

// TestV4RecordBytes checks the layer accounting: a layer reads less than
// it stores (unselected experts stay on disk) and more than its
// attention alone.
func TestV4RecordBytes(t *testing.T) {
	tr, _ := v4Tracer(t, v4.A8)
	_, r, err := tr.Layer(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 0 of v4-tiny: 29 tensors besides the 16 experts' 6 each.
	if r.StateTensors != 29+16*6 || r.StateBytes <= 0 || r.StateNumel <= 0 {
		t.Errorf("state %d tensors, %d values, %d bytes", r.StateTensors, r.StateNumel, r.StateBytes)
	}
	if r.WeightBytesRead <= 0 || r.WeightBytesRead > r.StateBytes || r.RoutedExpertsRun == 0 {
		t.Errorf("read %d of %d bytes with %d experts", r.WeightBytesRead, r.StateBytes, r.RoutedExpertsRun)
	}
}

// TestCalibrate checks what the tracer records of the routed experts'
// inputs, which nvfp4/'s calibration reads, against the golden chain (of
// a8, the precision calibration runs at; the golden records routed_w2_in
// of that one).
func TestCalibrate(t *testing.T) {
	for _, p := range []v4.Precision{v4.A8} {
		tr, _ := v4Tracer(t, p)
		v4tiny.CheckCalibration(t, tr, filepath.Join(testdata.Dir(t), "trace", "v4-tiny"), string(p))
	}
}

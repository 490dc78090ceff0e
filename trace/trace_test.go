package trace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

func TestParsePrompts(t *testing.T) {
	tests := []struct {
		name, in, err string
		n             int
	}{
		{"text and ids", `[{"id":"a","label":"A","text":"hi"},{"id":"b-2_x","token_ids":[1,2]}]`, "", 2},
		{"not a list", `{"id":"a","text":"hi"}`, "JSON list", 0},
		{"empty list", `[]`, "no prompts", 0},
		{"trailing", `[{"id":"a","text":"hi"}] x`, "trailing", 0},
		{"unknown field", `[{"id":"a","txt":"hi"}]`, `unknown field "txt"`, 0},
		{"no id", `[{"text":"hi"}]`, "prompt 1: no id", 0},
		{"bad id", `[{"id":"a b","text":"hi"}]`, `id "a b" must match`, 0},
		{"dot in id", `[{"id":"a.b","text":"hi"}]`, "must match", 0},
		{"duplicate", `[{"id":"a","text":"x"},{"id":"a","text":"y"}]`, "prompt 2 (a): id already used by prompt 1", 0},
		{"both", `[{"id":"a","text":"x","token_ids":[1]}]`, "not both", 0},
		{"neither", `[{"id":"a","label":"x"}]`, "give text or token_ids", 0},
		{"empty text", `[{"id":"a","text":""}]`, "empty text", 0},
		{"empty ids", `[{"id":"a","token_ids":[]}]`, "empty token_ids", 0},
		{"negative id", `[{"id":"a","token_ids":[3,-1]}]`, "token_ids[1] = -1", 0},
		{"fractional id", `[{"id":"a","token_ids":[1.5]}]`, "JSON list", 0},
	}
	for _, tt := range tests {
		p, err := ParsePrompts([]byte(tt.in))
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && len(p) != tt.n:
			t.Errorf("%s: %d prompts, want %d", tt.name, len(p), tt.n)
		}
	}
}

func TestEncodeWithoutTokenizer(t *testing.T) {
	if err := Encode(DefaultPrompts(), nil, 1000); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("text prompts without a tokenizer: %v", err)
	}
	p := []Prompt{{ID: "a", TokenIDs: []int{1, 2}}}
	if err := Encode(p, nil, 1000); err != nil || p[0].Tokens != nil {
		t.Errorf("token prompts without a tokenizer: %v, tokens %v", err, p[0].Tokens)
	}
	p = []Prompt{{ID: "a", TokenIDs: []int{1, 1000}}}
	if err := Encode(p, nil, 1000); err == nil || !strings.Contains(err.Error(), "outside the model's vocabulary") {
		t.Errorf("id past the vocabulary: %v", err)
	}
	// JSON shows the missing tokens as null.
	b, _ := encode(Prompt{ID: "a", TokenIDs: []int{1}})
	if !bytes.Contains(b, []byte(`"tokens": null`)) {
		t.Errorf("prompt JSON: %s", b)
	}
}

func TestStats(t *testing.T) {
	if got := quantile([]float64{4, 1, 3, 2}, 0.1); math.Abs(float64(got)-1.3) > 1e-12 {
		t.Errorf("quantile 0.1 = %v, want 1.3 (torch's linear interpolation)", got)
	}
	m := loadMetrics([]int{3, 0, 2, 1})
	want := map[string]float64{
		"mean": 1.5, "std": math.Sqrt(5.0 / 3), "gini": 10.0 / 24,
		"entropy": -(math.Log(1.0/6)/6 + math.Log(1.0/3)/3 + math.Log(0.5)/2),
	}
	got := map[string]float64{"mean": float64(m.Mean), "std": float64(m.Std), "gini": float64(m.Gini), "entropy": float64(m.EntropyNats)}
	for k, w := range want {
		if math.Abs(got[k]-w) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	if m.Routes != 6 || m.UsedExperts != 3 || m.ZeroExperts != 1 || m.Max != 3 || m.P50 != 1.5 {
		t.Errorf("%+v", m)
	}
	b, err := json.Marshal(struct{ A, B Num }{Num(math.NaN()), Num(math.Inf(1))})
	if err != nil || string(b) != `{"A":null,"B":null}` {
		t.Errorf("non-finite numbers: %s, %v", b, err)
	}
}

// goldenPrompts are the token ids of the reference sequences of
// testdata/trace.
func goldenPrompts(t *testing.T, name string) ([]Prompt, string) {
	t.Helper()
	dir, seqs := testdata.TraceSequences(t, name)
	var p []Prompt
	for i, s := range seqs {
		p = append(p, Prompt{ID: []string{"first", "second"}[i], Label: "golden", TokenIDs: s})
	}
	return p, dir
}

func openTracer(t *testing.T, dir string, prompts []Prompt) *Tracer {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	m, err := deepseek2.Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := LoadTokenizer(cat)
	if err != nil {
		t.Fatal(err)
	}
	if prompts == nil {
		prompts = DefaultPrompts()
	}
	if err := Encode(prompts, tok, m.Config.Vocab); err != nil {
		t.Fatal(err)
	}
	return New(m, backend.NewCPU(), prompts, tok, nil)
}

// TestMemo checks that each layer runs once when read in order, that a
// layer evicted from the recent activations runs again alone, and that
// records never run anything again.
func TestMemo(t *testing.T) {
	prompts, dir := goldenPrompts(t, "v3-tiny")
	tr := openTracer(t, dir, prompts)
	ctx := context.Background()
	steps := []struct {
		read     func() error
		forwards int64
	}{
		{func() error { _, _, err := tr.Layer(ctx, 2); return err }, 3},
		{func() error { _, _, err := tr.Layer(ctx, 3); return err }, 4},
		{func() error { _, _, err := tr.Layer(ctx, 2); return err }, 4}, // still recent
		{func() error { _, err := tr.Record(ctx, 0); return err }, 4},
		{func() error { _, _, err := tr.Layer(ctx, 0); return err }, 5}, // evicted: layer 0 alone
		{func() error { _, err := tr.TraceJSON(ctx); return err }, 5},
	}
	for i, s := range steps {
		if err := s.read(); err != nil {
			t.Fatal(err)
		}
		if got := tr.Forwards(); got != s.forwards {
			t.Fatalf("step %d: %d forwards, want %d", i, got, s.forwards)
		}
	}
	if _, _, err := tr.Layer(ctx, 4); err == nil {
		t.Error("layer 4 of 4 traced")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tr2 := openTracer(t, dir, prompts)
	if _, _, err := tr2.Layer(cctx, 1); err == nil {
		t.Error("a cancelled read ran")
	}
}

// TestActivations reads a layer's tensors the way the view does and
// checks their layout against the memoised output.
func TestActivations(t *testing.T) {
	prompts, dir := goldenPrompts(t, "v2lite-tiny")
	tr := openTracer(t, dir, prompts)
	ctx := context.Background()
	acts := tr.Activations(1)
	if len(acts) != 2*7 {
		t.Fatalf("%d activations of a MoE layer, want 14", len(acts))
	}
	if n := len(tr.Activations(0)); n != 2*5 {
		t.Fatalf("%d activations of a dense layer, want 10", n)
	}
	out, _, err := tr.Layer(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acts {
		b := make([]byte, int64(a.Rows)*a.RowBytes())
		if err := tr.ReadActivation(ctx, 1, a, 0, a.Rows, b); err != nil {
			t.Fatal(err)
		}
		first := 0
		if a.prompt == 1 {
			first = 7
		}
		v := binary.LittleEndian.Uint32(b[4*(a.Cols+1):]) // row 1, column 1
		switch a.kind {
		case "topk_ids":
			if int32(v) != out.Routes.IDs[(first+1)*a.Cols+1] {
				t.Errorf("%s: %d", a.Name, v)
			}
		default:
			src := activationValues(out, a.kind)
			if math.Float32frombits(v) != src[(first+1)*a.Cols+1] {
				t.Errorf("%s: %g", a.Name, math.Float32frombits(v))
			}
		}
	}
}

// TestDocuments traces the synthetic v2lite-tiny checkpoint with its
// tokenizer and the seed's prompts, and checks the documents' content.
func TestDocuments(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write("v2lite-tiny", dir); err != nil {
		t.Fatal(err)
	}
	tr := openTracer(t, dir, nil)
	ctx := context.Background()
	b, err := tr.LayerJSON(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	var rec LayerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	r := rec.Routing
	if rec.FFN != "moe" || r == nil || len(r.PerPrompt) != 4 || len(r.PairJaccard) != 6 || len(r.AggregateLoad) != 8 {
		t.Fatalf("layer 2 record: %s", b)
	}
	if r.AggregateMetrics.Routes != 3*tr.tokens {
		t.Errorf("%d routes for %d tokens × 3", r.AggregateMetrics.Routes, tr.tokens)
	}
	tok := r.PerPrompt[0].TokenRoutes[1]
	if tok.Token == nil || tok.DecodedPiece == nil || len(tok.ExpertsByWeight) != 3 || tok.ExpertsByWeight[0].Weight < tok.ExpertsByWeight[1].Weight {
		t.Errorf("token route: %+v", tok)
	}
	if rec.MLA.LatentCacheBytes != int64(tr.tokens*(64+16)*2) {
		t.Errorf("latent cache bytes %d", rec.MLA.LatentCacheBytes)
	}
	b, err = tr.TraceJSON(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doc Document
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Execution.Layers) != 4 || len(doc.Boundary.ExecutedLayers) != 4 || doc.Environment.Backend != "cpu" ||
		doc.Prompts[0].Tokens == nil || doc.Provenance.SHA256["tokenizer"] == "" || doc.Configuration.RouterTopKMethod != "greedy" {
		t.Fatalf("trace.json: %s", b)
	}
	// The final hidden state's hash is that of the last layer's output.
	out, _, err := tr.Layer(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, v := range out.HiddenOut {
		binary.Write(h, binary.LittleEndian, v)
	}
	if got := doc.Execution.FinalHidden.SHA256FP32; got != hex.EncodeToString(h.Sum(nil)) {
		t.Errorf("final hidden sha256 %s", got)
	}
	if doc.Execution.Layers[3].HiddenAfter.SHA256FP32 != doc.Execution.FinalHidden.SHA256FP32 {
		t.Error("last layer's hidden_after differs from final_hidden")
	}
	// The first text prompt starts with BOS, as tokenizer_config asks.
	if doc.Prompts[0].TokenIDs[0] != 0 {
		t.Errorf("prompt tokens %v do not start with BOS (0)", doc.Prompts[0].TokenIDs[:3])
	}
}

// TestConcurrentReaders reads layers from several goroutines at once: each
// layer runs once.
func TestConcurrentReaders(t *testing.T) {
	prompts, dir := goldenPrompts(t, "v2lite-tiny")
	tr := openTracer(t, dir, prompts)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := tr.Record(context.Background(), 3-i%2)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.Forwards(); n != 4 {
		t.Errorf("%d forwards for layers 0-3", n)
	}
}

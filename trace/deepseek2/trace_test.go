package deepseek2

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
)

// goldenPrompts are the token ids of the reference sequences of
// testdata/trace.
func goldenPrompts(t *testing.T, name string) ([]trace.Prompt, string) {
	t.Helper()
	dir, seqs := testdata.TraceSequences(t, name)
	var p []trace.Prompt
	for i, s := range seqs {
		p = append(p, trace.Prompt{ID: []string{"first", "second"}[i], Label: "golden", TokenIDs: s})
	}
	return p, dir
}

// core is the tracer of a V2/V3 model.
type core = trace.Core[[]float32, Output, LayerRecord, struct{}]

// openTracer traces prompts (the defaults when nil) through the
// checkpoint in dir on b (the CPU when nil).
func openTracer(t *testing.T, dir string, prompts []trace.Prompt, b ...backend.Backend) *core {
	t.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	m, err := Open(cat)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cat.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if prompts == nil {
		prompts = trace.DefaultPrompts()
	}
	if err := trace.Encode(prompts, tok, m.Config.Vocab); err != nil {
		t.Fatal(err)
	}
	opt := trace.Options{Tokenizer: tok}
	if len(b) > 0 {
		opt.Backend = b[0]
	}
	tr, err := traced{m}.Trace(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tr.(*core)
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
		b := make([]byte, int64(a.Rows())*a.RowBytes())
		if err := tr.ReadActivation(ctx, 1, a, 0, a.Rows(), b); err != nil {
			t.Fatal(err)
		}
		first := 0
		if a.Prompt == 1 {
			first = 7
		}
		cols := int(a.Shape[1])
		v := binary.LittleEndian.Uint32(b[4*(cols+1):]) // row 1, column 1
		src, err := rows(out, a)
		if err != nil {
			t.Fatal(err)
		}
		switch a.Kind {
		case "topk_ids":
			if int32(v) != src.I32[(first+1)*cols+1] {
				t.Errorf("%s: %d", a.Name, v)
			}
		default:
			if math.Float32frombits(v) != src.F32[(first+1)*cols+1] {
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
	if r.AggregateMetrics.Routes != 3*tr.Tokens() {
		t.Errorf("%d routes for %d tokens × 3", r.AggregateMetrics.Routes, tr.Tokens())
	}
	tok := r.PerPrompt[0].TokenRoutes[1]
	if tok.Token == nil || tok.DecodedPiece == nil || len(tok.ExpertsByWeight) != 3 || tok.ExpertsByWeight[0].Weight < tok.ExpertsByWeight[1].Weight {
		t.Errorf("token route: %+v", tok)
	}
	if rec.MLA.LatentCacheBytes != int64(tr.Tokens()*(64+16)*2) {
		t.Errorf("latent cache bytes %d", rec.MLA.LatentCacheBytes)
	}
	b, err = tr.TraceJSON(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doc Report
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

// attentionSignal is the CPU backend telling when an attention starts: the
// middle of a layer, and its most expensive part on a long prompt.
type attentionSignal struct {
	*backend.CPU
	started chan struct{}
}

func (a *attentionSignal) Attention(out, q, kv backend.Mat, heads int, scale float32) {
	select {
	case a.started <- struct{}{}:
	default:
	}
	a.CPU.Attention(out, q, kv, heads, scale)
}

// TestCancelMidLayer cancels a layer forward on a prompt of
// trace.MaxPromptTokens tokens once its attention runs (seconds on this
// model when left alone): Layer returns the cancellation, counts no
// forward, and leaves no goroutine behind (synctest checks that every
// goroutine of the bubble has ended).
func TestCancelMidLayer(t *testing.T) { synctest.Test(t, testCancelMidLayer) }

func testCancelMidLayer(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	long := make([]int, trace.MaxPromptTokens)
	for i := range long {
		long[i] = rng.IntN(512) // v2lite-tiny's vocabulary
	}
	_, dir := goldenPrompts(t, "v2lite-tiny")
	b := &attentionSignal{CPU: backend.NewCPU(), started: make(chan struct{}, 1)}
	tr := openTracer(t, dir, []trace.Prompt{{ID: "long", TokenIDs: long}}, b)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := tr.Layer(ctx, 0); done <- err }()
	select {
	case <-b.started:
	case err := <-done:
		t.Fatalf("seed %d: layer ended before its attention: %v", seed, err)
	}
	cancel() // the attention has started and runs for seconds
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("seed %d: Layer after cancel: %v", seed, err)
	}
	if tr.Forwards() != 0 {
		t.Fatalf("a cancelled forward was counted")
	}
}

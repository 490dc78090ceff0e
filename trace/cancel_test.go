package trace

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/trace/backend"
)

// TestPromptBounds: a prompt over MaxPromptTokens, or prompts over
// MaxTotalTokens together, give one error naming the file and the prompt.
func TestPromptBounds(t *testing.T) {
	ids := func(n int) []int { return make([]int, n) }
	type pj struct {
		ID       string `json:"id"`
		TokenIDs []int  `json:"token_ids"`
	}
	tests := []struct {
		name    string
		prompts []pj
		err     string
	}{
		{"at the limits", []pj{{"a", ids(MaxPromptTokens)}, {"b", ids(MaxTotalTokens - MaxPromptTokens)}}, ""},
		{"one prompt too long", []pj{{"short", ids(3)}, {"long", ids(MaxPromptTokens + 1)}}, "prompt 2 (long): 4097 tokens, more than the 4096 a prompt may hold"},
		{"32k tokens", []pj{{"huge", ids(32768)}}, "prompt 1 (huge): 32768 tokens"},
		{"too many together", []pj{{"a", ids(MaxPromptTokens)}, {"b", ids(MaxPromptTokens)}, {"c", ids(1)}}, "prompt 3 (c): the prompts up to this one hold 8193 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(tt.prompts)
			path := filepath.Join(t.TempDir(), "prompts.json")
			os.WriteFile(path, b, 0o644)
			p, err := LoadPrompts(path)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := Encode(p, nil, 1); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), path+": ") || strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("error %v, want one line starting %q and containing %q", err, path, tt.err)
			}
		})
	}
	// Prompts built in code are held to the same bounds by Encode.
	p := []Prompt{{ID: "a", TokenIDs: ids(MaxPromptTokens)}, {ID: "b", TokenIDs: ids(MaxPromptTokens)}, {ID: "c", TokenIDs: ids(1)}}
	if err := Encode(p, nil, 1); err == nil || !strings.Contains(err.Error(), "prompt c: the prompts up to this one hold 8193") {
		t.Fatalf("Encode over the total: %v", err)
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

// TestCancelMidLayer cancels a layer forward on a prompt of MaxPromptTokens
// tokens while its attention runs (seconds on this model when left alone):
// Layer returns within a second and leaves no goroutine behind.
func TestCancelMidLayer(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	long := make([]int, MaxPromptTokens)
	for i := range long {
		long[i] = rng.IntN(512) // v2lite-tiny's vocabulary
	}
	_, dir := goldenPrompts(t, "v2lite-tiny")
	tr := openTracer(t, dir, []Prompt{{ID: "long", TokenIDs: long}})
	b := &attentionSignal{CPU: backend.NewCPU(), started: make(chan struct{}, 1)}
	tr.backend = b

	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := tr.Layer(ctx, 0); done <- err }()
	select {
	case <-b.started:
	case err := <-done:
		t.Fatalf("seed %d: layer ended before its attention: %v", seed, err)
	}
	time.Sleep(50 * time.Millisecond) // well inside the attention: it takes seconds
	start := time.Now()
	cancel()
	err := <-done
	latency := time.Since(start)
	t.Logf("cancelled mid-layer: Layer returned %v after %v", err, latency)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("seed %d: Layer after cancel: %v", seed, err)
	}
	if latency > time.Second {
		t.Fatalf("seed %d: Layer returned %v after the cancel, want under 1 s", seed, latency)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after the cancel, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	if tr.Forwards() != 0 {
		t.Fatalf("a cancelled forward was counted")
	}
}

package v4

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/testdata"
)

// TestCancelMidLayer cancels a CSA layer of v4-tiny on a prompt long
// enough that its indexer (quadratic in the prompt) runs for seconds: the
// forward returns the cancellation within a fraction of a second and
// leaves no goroutine behind.
func TestCancelMidLayer(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	m := openDir(t, filepath.Join(testdata.Dir(t), "trace", "v4-tiny"))
	const tokens = 8192
	l := 2
	if m.Config.Kind(l) != CSA {
		t.Fatalf("layer %d of v4-tiny is %v, want a CSA layer", l, m.Config.Kind(l))
	}
	ids := make([]int, tokens)
	for i := range ids {
		ids[i] = rng.IntN(m.Config.Vocab)
	}
	stream := make([]float32, tokens*m.Config.HCMult*m.Config.Hidden)
	for i := range stream {
		stream[i] = float32(rng.NormFloat64())
	}

	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := m.Forward(ctx, l, stream, [][]int{ids}, A8)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
		t.Fatalf("seed %d: the layer ended within 200 ms (%v): the prompt is too short to test cancelling", seed, err)
	case <-time.After(200 * time.Millisecond):
	}
	start := time.Now()
	cancel()
	err = <-done
	latency := time.Since(start)
	t.Logf("cancelled mid-layer: Forward returned %v after %v", err, latency)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("seed %d: Forward after cancel: %v", seed, err)
	}
	if latency > 500*time.Millisecond {
		t.Fatalf("seed %d: Forward returned %v after the cancel, want under 0.5 s", seed, latency)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after the cancel, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// cancelAfter is a context that reports itself cancelled from the check
// after its first n: a cancel that lands between two tensors of a layer
// being loaded, with no timing involved.
type cancelAfter struct {
	context.Context
	n, checks int
	done      chan struct{}
}

func newCancelAfter(n int) *cancelAfter {
	return &cancelAfter{Context: context.Background(), n: n, done: make(chan struct{})}
}

func (c *cancelAfter) Err() error {
	c.checks++
	if c.checks <= c.n {
		return nil
	}
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return context.Canceled
}

func (c *cancelAfter) Done() <-chan struct{} { return c.done }

// TestCancelLoad41: loading a V4.1 layer's weights stops at the first
// tensor after the cancel, and the forward and the head report it.
func TestCancelLoad41(t *testing.T) {
	m, g := loadGolden41(t)
	l := slices.IndexFunc(m.Config.Roles, func(r Role41) bool { return r.Engram })
	if l < 0 {
		t.Fatal("v41-tiny has no Engram layer")
	}
	full, err := m.loadLayer41(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 5} {
		ctx := newCancelAfter(n)
		w, err := m.loadLayer41(ctx, l)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled after %d tensors: loadLayer41 = %v, want context.Canceled", n, err)
		}
		if ctx.checks != n+1 || w.bytes >= full.bytes {
			t.Fatalf("cancelled after %d tensors: %d checks, %d of the layer's %d bytes read: loading went on", n, ctx.checks, w.bytes, full.bytes)
		}
	}
	emb, err := m.EmbedRows(g.Sequences[0].TokenIDs)
	if err != nil {
		t.Fatal(err)
	}
	in := m.Config.InitialState41(emb, 1)
	if _, err := m.Forward(newCancelAfter(2), l, in, [][]int{g.Sequences[0].TokenIDs}, A8); !errors.Is(err, context.Canceled) {
		t.Fatalf("Forward cancelled while loading: %v", err)
	}
	if _, err := m.Logits(newCancelAfter(0), in); !errors.Is(err, context.Canceled) {
		t.Fatalf("Logits cancelled while loading: %v", err)
	}
}

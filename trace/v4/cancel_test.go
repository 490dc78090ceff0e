package v4

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsfs/dsfs/internal/testdata"
)

// TestCancelMidLayer cancels a CSA layer of v4-tiny half way through its
// work, counted in the forward's looks at its context (a run with a
// context that never ends counts them), on a prompt long enough that the
// indexer, quadratic in the prompt, dominates: the forward returns the
// cancellation at its next looks, a few per core, not at the end of the
// layer, and leaves no goroutine behind (synctest checks that every
// goroutine of the bubble has ended).
func TestCancelMidLayer(t *testing.T) { synctest.Test(t, testCancelMidLayer) }

func testCancelMidLayer(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	m := openDir(t, filepath.Join(testdata.Dir(t), "trace", "v4-tiny"))
	const tokens = 2048
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
	whole := newCancelAfter(math.MaxInt64)
	if _, err := m.Forward(whole, l, stream, [][]int{ids}, A8); err != nil {
		t.Fatal(err)
	}
	all := whole.checks.Load()
	half := newCancelAfter(all / 2)
	_, err := m.Forward(half, l, stream, [][]int{ids}, A8)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("seed %d: Forward cancelled at look %d of %d: %v", seed, all/2, all, err)
	}
	// After the cancel each worker looks once more at most before it
	// returns, and the forward once per step it unwinds.
	if extra, most := half.checks.Load()-all/2, int64(4*runtime.GOMAXPROCS(0)+16); extra > most {
		t.Fatalf("seed %d: %d looks at the context after the cancel (of %d in the layer), want at most %d: the work went on", seed, extra, all, most)
	}
}

// cancelAfter is a context that reports itself cancelled from the check
// after its first n: a cancel that lands at a given point of a layer's
// work (between two tensors being loaded, two tiles of a product), with
// no timing involved. Workers may check it at once.
type cancelAfter struct {
	context.Context
	n      int64
	checks atomic.Int64
	once   sync.Once
	done   chan struct{}
}

func newCancelAfter(n int64) *cancelAfter {
	return &cancelAfter{Context: context.Background(), n: n, done: make(chan struct{})}
}

func (c *cancelAfter) Err() error {
	if c.checks.Add(1) <= c.n {
		return nil
	}
	c.once.Do(func() { close(c.done) })
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
	for _, n := range []int64{0, 1, 5} {
		ctx := newCancelAfter(n)
		w, err := m.loadLayer41(ctx, l)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled after %d tensors: loadLayer41 = %v, want context.Canceled", n, err)
		}
		if ctx.checks.Load() != n+1 || w.bytes >= full.bytes {
			t.Fatalf("cancelled after %d tensors: %d checks, %d of the layer's %d bytes read: loading went on", n, ctx.checks.Load(), w.bytes, full.bytes)
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

package vfile

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// gated is a generate function that counts its runs and returns "doc" once
// release is closed, or its context's error when cancelled first.
type gated struct {
	runs     atomic.Int32
	canceled atomic.Int32
	release  chan struct{}
}

func (g *gated) generate(ctx context.Context) ([]byte, error) {
	g.runs.Add(1)
	select {
	case <-g.release:
		return []byte("doc"), nil
	case <-ctx.Done():
		g.canceled.Add(1)
		return nil, ctx.Err()
	}
}

func TestDocSharing(t *testing.T) {
	tests := []struct {
		name string
		// cancelFirst interrupts the reader that started the generation,
		// cancelSecond the one that joined it.
		cancelFirst, cancelSecond bool
		wantFirst, wantSecond     error
	}{
		{name: "both wait", wantFirst: nil, wantSecond: nil},
		{name: "second interrupted", cancelSecond: true, wantSecond: context.Canceled},
		{name: "first interrupted, work kept for the second", cancelFirst: true, wantFirst: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gated{release: make(chan struct{})}
				d := NewDoc(g.generate)
				read := func(ctx context.Context, out *error) func() {
					return func() {
						b, err := d.Bytes(ctx)
						if err == nil && string(b) != "doc" {
							err = errors.New("wrong bytes " + string(b))
						}
						*out = err
					}
				}
				ctx1, cancel1 := context.WithCancel(t.Context())
				ctx2, cancel2 := context.WithCancel(t.Context())
				defer cancel1()
				defer cancel2()
				var err1, err2 error
				done1, done2 := make(chan struct{}), make(chan struct{})
				go func() { read(ctx1, &err1)(); close(done1) }()
				synctest.Wait()
				go func() { read(ctx2, &err2)(); close(done2) }()
				synctest.Wait()
				if tt.cancelFirst {
					cancel1()
					<-done1 // returns while the generation still runs
				}
				if tt.cancelSecond {
					cancel2()
					<-done2
				}
				synctest.Wait()
				if g.canceled.Load() != 0 {
					t.Fatal("generation cancelled while a reader still waits for it")
				}
				close(g.release)
				<-done1
				<-done2
				if !errors.Is(err1, tt.wantFirst) || !errors.Is(err2, tt.wantSecond) {
					t.Fatalf("readers got %v, %v; want %v, %v", err1, err2, tt.wantFirst, tt.wantSecond)
				}
				if n := g.runs.Load(); n != 1 {
					t.Fatalf("generated %d times, want once", n)
				}
				if n, ok := d.Size(); !ok || n != 3 {
					t.Fatalf("Size = %d, %v after generation", n, ok)
				}
			})
		})
	}
}

func TestDocCancelledWhenNobodyWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gated{release: make(chan struct{})}
		d := NewDoc(g.generate)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { _, err := d.Bytes(ctx); done <- err }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Bytes = %v, want context.Canceled", err)
		}
		synctest.Wait()
		if g.canceled.Load() != 1 {
			t.Fatal("generation goes on with no reader waiting")
		}
		if _, ok := d.Size(); ok {
			t.Fatal("a cancelled generation was kept")
		}
		close(g.release)
		if b, err := d.Bytes(t.Context()); err != nil || string(b) != "doc" || g.runs.Load() != 2 {
			t.Fatalf("next read = %q, %v after %d runs; want a fresh generation", b, err, g.runs.Load())
		}
	})
}

func TestDocFailureNotKept(t *testing.T) {
	fail := true
	d := NewDoc(func(context.Context) ([]byte, error) {
		if fail {
			return nil, errors.New("source changed")
		}
		return []byte("ok"), nil
	})
	if _, err := d.Bytes(t.Context()); err == nil {
		t.Fatal("failure not reported")
	}
	fail = false
	if b, err := d.Bytes(t.Context()); err != nil || string(b) != "ok" {
		t.Fatalf("after a failure Bytes = %q, %v", b, err)
	}
}

package vfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
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
				if n, ok := d.Stat(t.Context()); !ok || n != 3 {
					t.Fatalf("Stat = %d, %v after generation", n, ok)
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
		if _, ok := d.Stat(t.Context()); ok {
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

// write is a streamed document's write function that counts its runs
// and writes "doc" once release is closed, or fails with its context's
// error when cancelled first.
func (g *gated) write(ctx context.Context, w io.Writer) error {
	b, err := g.generate(ctx)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// TestStreamedDocSharing: readers and stats arriving while a streamed document
// is written or measured wait for that one run, and an interrupted one
// does not cancel it for the others.
func TestStreamedDocSharing(t *testing.T) {
	for _, stat := range []bool{false, true} {
		t.Run(fmt.Sprintf("stat=%v", stat), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gated{release: make(chan struct{})}
				d := NewStreamedDoc(g.write)
				read := func(ctx context.Context) error {
					if stat {
						if n, ok := d.Stat(ctx); !ok || n != 3 {
							return fmt.Errorf("Stat = %d, %v: %w", n, ok, ctx.Err())
						}
						return nil
					}
					b, err := d.Bytes(ctx)
					if err == nil && string(b) != "doc" {
						err = errors.New("wrong bytes " + string(b))
					}
					return err
				}
				ctx1, cancel1 := context.WithCancel(t.Context())
				defer cancel1()
				done1, done2 := make(chan error, 1), make(chan error, 1)
				go func() { done1 <- read(ctx1) }()
				synctest.Wait()
				go func() { done2 <- read(t.Context()) }()
				synctest.Wait()
				cancel1()
				if err := <-done1; !errors.Is(err, context.Canceled) {
					t.Fatalf("interrupted reader got %v", err)
				}
				synctest.Wait()
				if g.canceled.Load() != 0 {
					t.Fatal("run cancelled while a reader still waits for it")
				}
				close(g.release)
				if err := <-done2; err != nil {
					t.Fatal(err)
				}
				if n := g.runs.Load(); n != 1 {
					t.Fatalf("written %d times, want once", n)
				}
			})
		})
	}
}

// TestStreamedDocCancelled: a measuring nobody waits for any more stops, is
// not kept, and the next stat measures afresh.
func TestStreamedDocCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gated{release: make(chan struct{})}
		d := NewStreamedDoc(g.write)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan bool, 1)
		go func() { _, ok := d.Stat(ctx); done <- ok }()
		synctest.Wait()
		cancel()
		if <-done {
			t.Fatal("an interrupted stat has a size")
		}
		synctest.Wait()
		if g.canceled.Load() != 1 {
			t.Fatal("measuring goes on with no reader waiting")
		}
		close(g.release)
		if n, ok := d.Stat(t.Context()); !ok || n != 3 || g.runs.Load() != 2 {
			t.Fatalf("next stat = %d, %v after %d runs; want a fresh measuring", n, ok, g.runs.Load())
		}
	})
}

// TestStreamedDocKeepsOnlyItsSize: measuring a large streamed document holds
// none of its bytes while it runs nor after, and reading it builds them
// once, in a buffer of the measured size, without keeping them.
func TestStreamedDocKeepsOnlyItsSize(t *testing.T) {
	const size = 64 << 20
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	d := NewStreamedDoc(func(_ context.Context, w io.Writer) error {
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n, ok := d.Stat(t.Context())
	runtime.GC()
	runtime.ReadMemStats(&after)
	if !ok || n != size {
		t.Fatalf("Stat = %d, %v; want %d", n, ok, size)
	}
	// Allowances of 1/8 of the document cover the runtime's own noise.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/8 {
		t.Errorf("measuring allocated %d bytes for a %d-byte document", alloc, size)
	}
	if kept := int64(after.HeapAlloc) - int64(before.HeapAlloc); kept > size/8 {
		t.Errorf("%d bytes kept after measuring a %d-byte document", kept, size)
	}

	runtime.ReadMemStats(&before)
	b, err := d.Bytes(t.Context())
	if err != nil || len(b) != size {
		t.Fatalf("Bytes = %d bytes, %v", len(b), err)
	}
	b = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size+size/8 {
		t.Errorf("reading allocated %d bytes for a %d-byte document: more than one buffer", alloc, size)
	}
	if kept := int64(after.HeapAlloc) - int64(before.HeapAlloc); kept > size/8 {
		t.Errorf("%d bytes kept after reading a %d-byte streamed document", kept, size)
	}
}

// TestStreamedDocSizeChange: a streamed document that comes out at another
// length than measured is an error, not a file whose size lies.
func TestStreamedDocSizeChange(t *testing.T) {
	text := "four"
	d := NewStreamedDoc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, text)
		return err
	})
	if n, ok := d.Stat(t.Context()); !ok || n != 4 {
		t.Fatalf("Stat = %d, %v", n, ok)
	}
	text = "five!"
	if _, err := d.Bytes(t.Context()); err == nil {
		t.Fatal("a document longer than measured was served")
	}
}

// TestHeaderDocStat: a header document is generated by its first stat and
// kept, so later stats and reads do not generate it again.
func TestHeaderDocStat(t *testing.T) {
	runs := 0
	d := NewHeaderDoc(func(context.Context) ([]byte, error) {
		runs++
		return []byte("readme"), nil
	})
	for range 2 {
		if n, ok := d.Stat(t.Context()); !ok || n != 6 {
			t.Fatalf("Stat = %d, %v", n, ok)
		}
	}
	if b, err := d.Bytes(t.Context()); err != nil || string(b) != "readme" || runs != 1 {
		t.Fatalf("Bytes = %q, %v after %d runs; want one run", b, err, runs)
	}
}

package blockcache

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

func fill(v byte) Compute {
	return func(ctx context.Context, dst []byte) error {
		for i := range dst {
			dst[i] = v
		}
		return nil
	}
}

func TestOneComputationForConcurrentReaders(t *testing.T) {
	synctest.Test(t, testOneComputationForConcurrentReaders)
}

func testOneComputationForConcurrentReaders(t *testing.T) {
	c := New(1<<20, 2)
	defer c.Close()
	var calls atomic.Int64
	release := make(chan struct{})
	compute := func(ctx context.Context, dst []byte) error {
		calls.Add(1)
		<-release
		copy(dst, "block")
		return nil
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := c.Get(context.Background(), Key{"x", 3}, 5, compute)
			if err != nil || string(b) != "block" {
				t.Errorf("Get = %q, %v", b, err)
			}
		}()
	}
	synctest.Wait() // every reader waits: one computing, fifteen sharing
	if n := c.Stats().Shared; n != 15 {
		t.Fatalf("%d readers share the computation, want 15", n)
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("computed %d times, want 1", n)
	}
	if _, err := c.Get(context.Background(), Key{"x", 3}, 5, compute); err != nil || c.Stats().Hits != 1 {
		t.Fatalf("second Get: err %v, stats %+v", err, c.Stats())
	}
}

func TestBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	tests := []struct {
		name    string
		budget  int64
		reads   []int64 // block numbers, each 100 bytes
		present []int64
		absent  []int64
	}{
		{"fits", 300, []int64{1, 2, 3}, []int64{1, 2, 3}, nil},
		{"evicts oldest", 300, []int64{1, 2, 3, 4}, []int64{2, 3, 4}, []int64{1}},
		{"recent use protects", 300, []int64{1, 2, 3, 1, 4}, []int64{1, 3, 4}, []int64{2}},
		{"larger than budget not kept", 50, []int64{1}, nil, []int64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.budget, 1)
			defer c.Close()
			for _, b := range tt.reads {
				if _, err := c.Get(context.Background(), Key{"t", b}, 100, fill(byte(b))); err != nil {
					t.Fatal(err)
				}
			}
			if s := c.Stats(); s.Bytes > tt.budget {
				t.Fatalf("cached %d bytes over budget %d", s.Bytes, tt.budget)
			}
			for _, b := range tt.present {
				if !c.lru.Contains(Key{"t", b}) {
					t.Errorf("block %d evicted, want kept", b)
				}
			}
			for _, b := range tt.absent {
				if c.lru.Contains(Key{"t", b}) {
					t.Errorf("block %d kept, want evicted", b)
				}
			}
		})
	}
}

func TestAbandonedComputationStops(t *testing.T) {
	synctest.Test(t, testAbandonedComputationStops)
}

func testAbandonedComputationStops(t *testing.T) {
	c := New(1<<20, 1)
	defer c.Close()
	stopped := make(chan struct{})
	compute := func(ctx context.Context, dst []byte) error {
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { synctest.Wait(); cancel() }() // once the reader waits
	if _, err := c.Get(ctx, Key{"a", 0}, 8, compute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", err)
	}
	synctest.Wait()
	select {
	case <-stopped:
	default:
		t.Fatal("computation kept running after its only reader left")
	}
	// The next reader computes afresh and is not handed the canceled result.
	b, err := c.Get(context.Background(), Key{"a", 0}, 8, fill(7))
	if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{7}, 8)) {
		t.Fatalf("Get after cancel = %v, %v", b, err)
	}
}

func TestComputationContinuesWhileAnotherWaits(t *testing.T) {
	synctest.Test(t, testComputationContinuesWhileAnotherWaits)
}

func testComputationContinuesWhileAnotherWaits(t *testing.T) {
	c := New(1<<20, 1)
	defer c.Close()
	release := make(chan struct{})
	var canceled atomic.Bool
	compute := func(ctx context.Context, dst []byte) error {
		select {
		case <-release:
			dst[0] = 1
			return nil
		case <-ctx.Done():
			canceled.Store(true)
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Get(ctx, Key{"b", 0}, 1, compute); errc <- err }()
	synctest.Wait() // the first reader's computation runs
	done := make(chan []byte, 1)
	go func() {
		b, _ := c.Get(context.Background(), Key{"b", 0}, 1, compute)
		done <- b
	}()
	synctest.Wait()
	if c.Stats().Shared != 1 {
		t.Fatalf("the second reader did not join the computation: %+v", c.Stats())
	}
	cancel()
	<-errc
	close(release)
	if b := <-done; len(b) != 1 || b[0] != 1 || canceled.Load() {
		t.Fatalf("second reader got %v (canceled %v)", b, canceled.Load())
	}
}

func TestErrorsAreNotCached(t *testing.T) {
	c := New(1<<20, 1)
	defer c.Close()
	bad := errors.New("source changed")
	if _, err := c.Get(context.Background(), Key{"e", 0}, 4, func(context.Context, []byte) error { return bad }); !errors.Is(err, bad) {
		t.Fatalf("Get = %v", err)
	}
	if b, err := c.Get(context.Background(), Key{"e", 0}, 4, fill(1)); err != nil || b[0] != 1 {
		t.Fatalf("retry = %v, %v", b, err)
	}
	if s := c.Stats(); s.Errors != 1 || s.Computed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPrefetchIsBoundedAndShared(t *testing.T) {
	synctest.Test(t, testPrefetchIsBoundedAndShared)
}

func testPrefetchIsBoundedAndShared(t *testing.T) {
	c := New(1<<20, 2)
	release := make(chan struct{})
	var calls atomic.Int64
	compute := func(ctx context.Context, dst []byte) error {
		calls.Add(1)
		<-release
		return nil
	}
	for i := range int64(10) {
		c.Prefetch(context.Background(), Key{"p", i}, 1, compute)
	}
	if n := c.Stats().ReadAhead; n != 2 {
		t.Fatalf("started %d read-aheads with 2 workers", n)
	}
	close(release)
	if _, err := c.Get(context.Background(), Key{"p", 0}, 1, compute); err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the other read-ahead finishes
	c.Close()
	if n := calls.Load(); n != 2 {
		t.Fatalf("computed %d blocks, want 2 (the reader joins the read-ahead)", n)
	}
}

func TestComputationsAreBounded(t *testing.T) {
	synctest.Test(t, testComputationsAreBounded)
}

func testComputationsAreBounded(t *testing.T) {
	c := New(1<<20, 1) // at most 4 computations at once
	defer c.Close()
	var running, peak atomic.Int64
	release := make(chan struct{})
	compute := func(ctx context.Context, dst []byte) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	for i := range int64(12) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get(context.Background(), Key{"b", i}, 1, compute); err != nil {
				t.Error(err)
			}
		}()
	}
	synctest.Wait() // every reader computes or waits: a fifth would have started by now
	if p := peak.Load(); p != 4 {
		t.Fatalf("%d computations ran at once, want 4", p)
	}
	close(release)
	wg.Wait()
}

func TestPrefetchEndsWithItsReader(t *testing.T) {
	synctest.Test(t, testPrefetchEndsWithItsReader)
}

// testPrefetchEndsWithItsReader: a read-ahead stops when the open file it
// reads ahead of goes (its context ends), unless a reader waits for it.
func testPrefetchEndsWithItsReader(t *testing.T) {
	c := New(1<<20, 2)
	defer c.Close()
	stopped := make(chan int64, 2)
	release := make(chan struct{})
	compute := func(i int64) Compute {
		return func(ctx context.Context, dst []byte) error {
			select {
			case <-ctx.Done():
				stopped <- i
				return ctx.Err()
			case <-release:
				return nil
			}
		}
	}
	file, closeFile := context.WithCancel(context.Background())
	c.Prefetch(file, Key{"p", 0}, 1, compute(0))
	c.Prefetch(file, Key{"p", 1}, 1, compute(1))
	got := make(chan error, 1)
	go func() { // a reader joins block 1
		_, err := c.Get(context.Background(), Key{"p", 1}, 1, compute(1))
		got <- err
	}()
	synctest.Wait()
	closeFile()
	synctest.Wait()
	select {
	case i := <-stopped:
		if i != 0 {
			t.Fatalf("block %d stopped, want 0 (1 has a reader)", i)
		}
	default:
		t.Fatal("the read-ahead of a closed file went on")
	}
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("the reader of block 1: %v", err)
	}
}

// TestProgress: Progress counts each block computed once however often it
// is computed again, and the blocks held now, which eviction lowers.
func TestProgress(t *testing.T) {
	c := New(4<<10, 1) // four 1 KiB blocks
	defer c.Close()
	get := func(id string, block int64) {
		t.Helper()
		if _, err := c.Get(context.Background(), Key{id, block}, 1<<10, fill(1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		id    string
		block int64
		a, b  Progress // after the read, of "a" and of "b"
	}{
		{"a", 0, Progress{1, 1}, Progress{}},
		{"a", 0, Progress{1, 1}, Progress{}}, // a hit
		{"a", 130, Progress{2, 2}, Progress{}},
		{"b", 0, Progress{2, 2}, Progress{1, 1}},
		{"b", 1, Progress{2, 2}, Progress{2, 2}},
		{"b", 2, Progress{2, 1}, Progress{3, 3}}, // evicts a/0, the least recently read
		{"a", 0, Progress{2, 1}, Progress{3, 3}}, // computed again, evicting a/130
		{"b", 0, Progress{2, 1}, Progress{3, 3}}, // a hit
	} {
		get(tc.id, tc.block)
		if a, b := c.Progress([]string{"a"}), c.Progress([]string{"b"}); a != tc.a || b != tc.b {
			t.Errorf("after %s/%d: a %+v, b %+v; want %+v, %+v", tc.id, tc.block, a, b, tc.a, tc.b)
		}
	}
	if p := c.Progress([]string{"a", "b", "none"}); p.Resident != 4 || p.Computed != 5 {
		t.Errorf("a, b and none: %+v", p)
	}
}

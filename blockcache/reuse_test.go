package blockcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// same reports whether a and b start at the same byte: one buffer.
func same(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

// TestReuse: which buffers a new block may be computed into. A buffer is
// reused only when nothing but the cache can read it: a consumed block
// whose leases are all released, or, in a full cache, the least recently
// used block with none; never one Get handed out, never one of another
// size. A reused buffer reaches the computation cleared, and its old
// block is no longer cached.
func TestReuse(t *testing.T) {
	const n = 100
	type step struct {
		op    string // lease, get, release, consume
		block int64
	}
	for _, tt := range []struct {
		name   string
		budget int64
		steps  []step
		// then block 9 is computed: reusing the buffer of block from,
		// or none (-1)
		from int64
		size int // block 9's size; n if 0
	}{
		{"consumed and released", 1000, []step{{"lease", 1}, {"consume", 1}, {"release", 1}}, 1, 0},
		{"consumed, still leased", 1000, []step{{"lease", 1}, {"consume", 1}}, -1, 0},
		{"released, not consumed, room left", 1000, []step{{"lease", 1}, {"release", 1}}, -1, 0},
		{"leased twice, released once", 1000, []step{{"lease", 1}, {"lease", 1}, {"consume", 1}, {"release", 1}}, -1, 0},
		{"leased twice, released twice", 1000, []step{{"lease", 1}, {"lease", 1}, {"consume", 1}, {"release", 1}, {"release", 1}}, 1, 0},
		{"handed out by Get", 1000, []step{{"lease", 1}, {"get", 1}, {"consume", 1}, {"release", 1}}, -1, 0},
		{"oldest consumed first", 1000, []step{{"lease", 2}, {"lease", 1}, {"consume", 1}, {"consume", 2}, {"release", 1}, {"release", 2}}, 1, 0},
		{"a leased consumed block is passed over", 1000, []step{{"lease", 1}, {"lease", 2}, {"consume", 1}, {"consume", 2}, {"release", 2}}, 2, 0},
		{"full cache: least recently used", 300, []step{{"lease", 1}, {"lease", 2}, {"lease", 3}, {"release", 1}, {"release", 2}, {"release", 3}}, 1, 0},
		{"full cache, oldest leased", 300, []step{{"lease", 1}, {"lease", 2}, {"lease", 3}, {"release", 2}, {"release", 3}}, -1, 0},
		{"too large", 1000, []step{{"lease", 1}, {"consume", 1}, {"release", 1}}, -1, n / 2},
		{"a ninth smaller", 1000, []step{{"lease", 1}, {"consume", 1}, {"release", 1}}, 1, n * 9 / 10},
		{"a seventh smaller", 1000, []step{{"lease", 1}, {"consume", 1}, {"release", 1}}, -1, n * 6 / 7},
		{"larger", 1000, []step{{"lease", 1}, {"consume", 1}, {"release", 1}}, -1, n + 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.budget, 1)
			defer c.Close()
			leases := map[int64][]Lease{}
			bufs := map[int64][]byte{}
			for _, s := range tt.steps {
				k := Key{"r", s.block}
				switch s.op {
				case "lease":
					l, err := c.Lease(context.Background(), k, n, fill(byte(s.block)))
					if err != nil {
						t.Fatal(err)
					}
					leases[s.block] = append(leases[s.block], l)
					bufs[s.block] = l.Bytes()
				case "get":
					if _, err := c.Get(context.Background(), k, n, fill(byte(s.block))); err != nil {
						t.Fatal(err)
					}
				case "release":
					ls := leases[s.block]
					ls[0].Release()
					leases[s.block] = ls[1:]
				case "consume":
					c.Consumed(k)
				}
			}
			size := cmpOr(tt.size, n)
			var seen []byte
			l, err := c.Lease(context.Background(), Key{"r", 9}, size, func(ctx context.Context, dst []byte) error {
				seen = bytes.Clone(dst)
				return fill(9)(ctx, dst)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if !bytes.Equal(seen, make([]byte, size)) {
				t.Fatalf("the computation found %v, not a cleared buffer", seen)
			}
			if !bytes.Equal(l.Bytes(), bytes.Repeat([]byte{9}, size)) {
				t.Fatal("block 9's bytes are not its own")
			}
			reused := c.Stats().Reused == 1
			switch {
			case tt.from < 0 && reused:
				t.Fatal("a buffer was reused")
			case tt.from >= 0 && !reused:
				t.Fatalf("no buffer was reused, want block %d's", tt.from)
			case tt.from >= 0 && !same(l.Bytes(), bufs[tt.from]):
				t.Fatalf("block 9 took another buffer than block %d's", tt.from)
			case tt.from >= 0 && c.lru.Contains(Key{"r", tt.from}):
				t.Fatalf("block %d is still cached with its buffer reused", tt.from)
			}
			// Whatever was not reused still holds its own bytes.
			for b, buf := range bufs {
				if b != tt.from && !bytes.Equal(buf, bytes.Repeat([]byte{byte(b)}, n)) {
					t.Fatalf("block %d's bytes changed", b)
				}
			}
			// The budget counts the memory held: a reused buffer's
			// capacity, not only its block's bytes.
			c.mu.Lock()
			var held int64
			for _, b := range c.lru.Values() {
				held += int64(cap(b.data))
			}
			c.mu.Unlock()
			if s := c.Stats(); s.Bytes != held {
				t.Fatalf("cached_bytes %d, but the cached blocks hold %d", s.Bytes, held)
			}
		})
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// TestReuseGetsPastBlocksHeldLong: consumed blocks whose leases are not
// released soon (a reply the kernel never took) or that Get handed out do
// not keep the consumed blocks behind them from being reused.
func TestReuseGetsPastBlocksHeldLong(t *testing.T) {
	c := New(1<<20, 1)
	defer c.Close()
	for i := range int64(2 * reclaimLooks) {
		k := Key{"held", i}
		if _, err := c.Lease(context.Background(), k, 10, fill(1)); err != nil { // never released
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := c.Get(context.Background(), k, 10, fill(1)); err != nil {
				t.Fatal(err)
			}
		}
		c.Consumed(k)
	}
	free, err := c.Lease(context.Background(), Key{"free", 0}, 10, fill(2))
	if err != nil {
		t.Fatal(err)
	}
	c.Consumed(Key{"free", 0})
	free.Release()
	for try := range 3 {
		if b := c.reuse(t, 10); b != nil {
			if !same(b, free.Bytes()) {
				t.Fatal("reused a buffer still held")
			}
			return
		}
		t.Logf("try %d: nothing to reuse yet", try)
	}
	t.Fatal("the free block behind those held long was never reused")
}

// TestReleasedTwicePanics: a Lease released twice would let the cache
// reuse a buffer another holder still reads, so it panics rather than
// serve another block's bytes.
func TestReleasedTwicePanics(t *testing.T) {
	c := New(1000, 1)
	defer c.Close()
	l, err := c.Lease(context.Background(), Key{"r", 1}, 10, fill(1))
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("a second Release did not panic")
		}
	}()
	l.Release()
}

func TestLeaseWaitersAreCounted(t *testing.T) {
	synctest.Test(t, testLeaseWaitersAreCounted)
}

// testLeaseWaitersAreCounted: readers that lease a block while it is
// computed hold it from when it is ready, those that gave up before do
// not, and one whose context ends as the block becomes ready lets go of
// what it was counted for. After all have let go, its buffer is reused.
func testLeaseWaitersAreCounted(t *testing.T) {
	c := New(1000, 1)
	defer c.Close()
	release := make(chan struct{})
	compute := func(ctx context.Context, dst []byte) error {
		<-release
		return fill(1)(ctx, dst)
	}
	k := Key{"w", 0}
	gone, leave := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Lease(gone, k, 10, compute); errc <- err }()
	held := make(chan Lease, 2)
	for range 2 {
		go func() {
			l, err := c.Lease(context.Background(), k, 10, compute)
			if err != nil {
				t.Error(err)
			}
			held <- l
		}()
	}
	synctest.Wait()
	leave()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the reader that left: %v", err)
	}
	close(release)
	a, b := <-held, <-held
	c.Consumed(k)
	a.Release()
	if buf := c.reuse(t, 10); buf != nil {
		t.Fatal("reused a buffer one lease still holds")
	}
	b.Release()
	if buf := c.reuse(t, 10); !same(buf, a.Bytes()) {
		t.Fatal("the released block's buffer was not reused")
	}
}

// reuse is the buffer the cache would compute a new n-byte block into
// when it reuses one, else nil.
func (c *Cache) reuse(t *testing.T, n int) []byte {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reclaim(n)
}

// TestLeasesUnderLoad: readers lease random blocks of a small cache, check
// their bytes, consume some and release them, while the cache reuses
// buffers under them: every block read holds its own bytes for as long as
// it is held.
func TestLeasesUnderLoad(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	c := New(64<<10, 2)
	defer c.Close()
	content := func(k Key) Compute {
		return func(ctx context.Context, dst []byte) error {
			for i := range dst {
				dst[i] = byte(k.Block*7 + int64(i))
			}
			return nil
		}
	}
	check := func(k Key, b []byte) error {
		for i, v := range b {
			if v != byte(k.Block*7+int64(i)) {
				return fmt.Errorf("seed %d: block %d byte %d is %d", seed, k.Block, i, v)
			}
		}
		return nil
	}
	errc := make(chan error, 8)
	for r := range 8 {
		go func() {
			rng := rand.New(rand.NewPCG(seed, uint64(r)))
			var held []struct {
				k Key
				l Lease
			}
			for range 2000 {
				k := Key{"l", rng.Int64N(64)}
				l, err := c.Lease(context.Background(), k, 4<<10, content(k))
				if err != nil {
					errc <- err
					return
				}
				held = append(held, struct {
					k Key
					l Lease
				}{k, l})
				if rng.IntN(2) == 0 {
					c.Consumed(k)
				}
				for len(held) > rng.IntN(4) {
					h := held[0]
					if err := check(h.k, h.l.Bytes()); err != nil {
						errc <- err
						return
					}
					h.l.Release()
					held = held[1:]
				}
			}
			for _, h := range held {
				h.l.Release()
			}
			errc <- nil
		}()
	}
	for range 8 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if c.Stats().Reused == 0 {
		t.Fatalf("seed %d: no buffer was reused", seed)
	}
}

// TestLeaseWaiterLeavingAsItsBlockIsReady: a lease waiting on a
// computation whose context ends just as the block becomes ready was
// counted in as a holder when the block was; leaving, it lets go, so the
// buffer is reused once the block is consumed. (Which of the two a waiter
// sees first is the scheduler's choice, so the waiter is played here.)
func TestLeaseWaiterLeavingAsItsBlockIsReady(t *testing.T) {
	c := New(1000, 1)
	defer c.Close()
	k := Key{"w", 0}
	c.mu.Lock()
	f := c.start(k, 10, fill(1), 1)
	f.leases++ // a Lease joins, as acquire has it
	c.mu.Unlock()
	<-f.done
	c.leave(k, f, true) // its context ended too, and select chose that
	c.Consumed(k)
	if c.reuse(t, 10) == nil {
		t.Fatal("the block is held by no one but was not reused")
	}
}

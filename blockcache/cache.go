// Package blockcache holds computed blocks of virtual files in memory under a
// byte budget. Each block is computed at most once however many readers ask
// for it at the same time, a computation stops when every reader waiting for
// it has gone, and sequential readers can have the next blocks computed
// ahead of time on a bounded worker pool.
package blockcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"
)

// Key names one block: ID names the derived data (view, file, tensor), Block
// its index.
type Key struct {
	ID    string
	Block int64
}

// Compute fills dst (len n) with a block's bytes.
type Compute func(ctx context.Context, dst []byte) error

// Stats are cumulative counters; they are read by the status files.
type Stats struct {
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Computed  int64 `json:"blocks_computed"`
	Shared    int64 `json:"waits_shared"` // a reader joined a computation already running
	ReadAhead int64 `json:"read_ahead"`
	Canceled  int64 `json:"canceled"`
	Errors    int64 `json:"errors"`
	Bytes     int64 `json:"cached_bytes"`
	Budget    int64 `json:"budget_bytes"`
	Blocks    int64 `json:"cached_blocks"`
	InFlight  int64 `json:"in_flight"`
}

// Cache is an LRU of computed blocks with a byte budget.
type Cache struct {
	budget int64

	mu      sync.Mutex
	lru     *lru.LRU[Key, []byte]
	used    int64
	flights map[Key]*flight
	ids     map[string]*idProgress // what became of each ID's blocks

	workers chan struct{} // read-ahead slots
	// computing bounds the computations running at once, readers' and
	// read-ahead alike, so scratch memory stays bounded however many
	// readers the kernel sends.
	computing chan struct{}
	wg        sync.WaitGroup
	ctx       context.Context // cancelled by Close
	stop      context.CancelFunc

	hits, misses, computed, shared, readAhead, canceled, errs atomic.Int64
}

// idProgress is what became of one ID's blocks: which were ever
// computed (a bit each, growing to the highest index seen) and how many
// are held now.
type idProgress struct {
	done     []uint64
	computed int64 // bits set in done
	resident int64
}

// Progress is what became of the blocks of a set of IDs.
type Progress struct {
	// Computed counts the blocks computed at least once since the cache
	// was made, each once however often it was computed again.
	Computed int64
	// Resident counts the blocks held now.
	Resident int64
}

type flight struct {
	done    chan struct{}
	data    []byte
	err     error
	waiters int // readers still interested; guarded by Cache.mu
	cancel  context.CancelFunc
}

// New returns a cache holding at most budget bytes of blocks, computing
// read-ahead on at most workers goroutines at a time and at most 4 x workers
// blocks at once in all.
func New(budget int64, workers int) *Cache {
	if workers < 1 {
		workers = 1
	}
	c := &Cache{budget: budget, flights: make(map[Key]*flight), ids: make(map[string]*idProgress),
		workers: make(chan struct{}, workers), computing: make(chan struct{}, 4*workers)}
	// The count bound is never reached: the byte budget evicts first.
	c.lru, _ = lru.NewLRU[Key, []byte](1<<30, nil)
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c
}

// Budget is the most bytes of blocks the cache keeps.
func (c *Cache) Budget() int64 { return c.budget }

// Get returns the n-byte block named by k, computing it if it is not cached.
// The returned slice is shared and must not be modified. If ctx ends before
// the block is ready, Get returns ctx's error; the computation itself stops
// only when no other reader waits for it.
func (c *Cache) Get(ctx context.Context, k Key, n int, compute Compute) ([]byte, error) {
	c.mu.Lock()
	if b, ok := c.lru.Get(k); ok {
		c.mu.Unlock()
		c.hits.Add(1)
		return b, nil
	}
	f, running := c.flights[k]
	switch {
	case running:
		f.waiters++
		c.shared.Add(1)
	case ctx.Err() != nil: // a reader already gone starts nothing
		c.mu.Unlock()
		return nil, ctx.Err()
	default:
		f = c.start(k, n, compute, 1)
	}
	c.mu.Unlock()
	c.misses.Add(1)

	select {
	case <-f.done:
		return f.data, f.err
	case <-ctx.Done():
		c.leave(k, f)
		return nil, ctx.Err()
	}
}

// leave counts a waiter of flight f of k out and stops the work when it
// was the last.
func (c *Cache) leave(k Key, f *flight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.waiters--
	if f.waiters == 0 {
		// Nobody wants the block any more: stop the work, and let the
		// next reader start afresh rather than join a dying flight.
		f.cancel()
		if c.flights[k] == f {
			delete(c.flights, k)
		}
	}
}

// Prefetch computes block k in the background if it is neither cached nor
// running and a worker is free; otherwise it does nothing, so a reader
// never waits on read-ahead. The read-ahead counts as a waiter for as
// long as ctx lives (the open file it reads ahead of): readers joining it
// cannot cancel it, and once ctx ends it stops unless a reader waits.
func (c *Cache) Prefetch(ctx context.Context, k Key, n int, compute Compute) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil || c.lru.Contains(k) || c.flights[k] != nil {
		return
	}
	select {
	case c.workers <- struct{}{}:
	default:
		return
	}
	c.readAhead.Add(1)
	f := c.start(k, n, compute, 1)
	go func() {
		select {
		case <-f.done:
		case <-ctx.Done():
			c.leave(k, f)
			<-f.done
		}
		<-c.workers
	}()
}

// start launches the computation of k; c.mu is held.
func (c *Cache) start(k Key, n int, compute Compute, waiters int) *flight {
	ctx, cancel := context.WithCancel(c.ctx)
	f := &flight{done: make(chan struct{}), waiters: waiters, cancel: cancel}
	c.flights[k] = f
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		var err error
		select {
		case c.computing <- struct{}{}:
			buf := make([]byte, n)
			populate(buf)
			err = compute(ctx, buf)
			<-c.computing
			if err == nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			if err == nil {
				f.data = buf
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
		c.mu.Lock()
		if c.flights[k] == f {
			delete(c.flights, k)
		}
		if err == nil {
			c.computedOnce(k)
			c.add(k, f.data)
		}
		f.err = err
		c.mu.Unlock()
		switch {
		case err == nil:
			c.computed.Add(1)
		case errors.Is(err, context.Canceled):
			c.canceled.Add(1)
		default:
			c.errs.Add(1)
		}
		close(f.done)
	}()
	return f
}

// add inserts a block and evicts the least recently used ones until the
// budget holds; c.mu is held. A block larger than the whole budget is
// served but not kept.
func (c *Cache) add(k Key, b []byte) {
	if int64(len(b)) > c.budget {
		return
	}
	if old, ok := c.lru.Peek(k); ok {
		c.used -= int64(len(old))
		c.ids[k.ID].resident--
	}
	c.lru.Add(k, b)
	c.used += int64(len(b))
	c.ids[k.ID].resident++
	for c.used > c.budget {
		old, b, ok := c.lru.RemoveOldest()
		if !ok {
			break
		}
		c.used -= int64(len(b))
		c.ids[old.ID].resident--
	}
}

// computedOnce records that block k was computed; c.mu is held.
func (c *Cache) computedOnce(k Key) {
	p := c.ids[k.ID]
	if p == nil {
		p = new(idProgress)
		c.ids[k.ID] = p
	}
	w, bit := k.Block/64, uint64(1)<<(k.Block%64)
	if w >= int64(len(p.done)) {
		p.done = append(p.done, make([]uint64, w+1-int64(len(p.done)))...)
	}
	if p.done[w]&bit == 0 {
		p.done[w] |= bit
		p.computed++
	}
}

// Progress sums what became of the blocks of ids: how many were computed
// at least once, how many are held now. A caller that knows how many
// blocks the IDs have (vfile.Blocks.Count) learns from it how many were
// never computed.
func (c *Cache) Progress(ids []string) Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p Progress
	for _, id := range ids {
		if q := c.ids[id]; q != nil {
			p.Computed += q.computed
			p.Resident += q.resident
		}
	}
	return p
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	used, blocks, inflight := c.used, int64(c.lru.Len()), int64(len(c.flights))
	c.mu.Unlock()
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Computed: c.computed.Load(),
		Shared: c.shared.Load(), ReadAhead: c.readAhead.Load(), Canceled: c.canceled.Load(),
		Errors: c.errs.Load(), Bytes: used, Budget: c.budget, Blocks: blocks, InFlight: inflight,
	}
}

// Close cancels every computation and waits for them to return, so no
// goroutine outlives the cache.
func (c *Cache) Close() {
	c.stop()
	c.wg.Wait()
}

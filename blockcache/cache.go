// Package blockcache holds computed blocks of virtual files in memory under a
// byte budget. Each block is computed at most once however many readers ask
// for it at the same time, a computation stops when every reader waiting for
// it has gone, and sequential readers can have the next blocks computed
// ahead of time on a bounded worker pool.
//
// # Reusing blocks' memory
//
// A block's buffer is fresh memory unless the cache can reuse one it holds:
// the kernel must back fresh memory page by page, which in a first read of
// a transcoded file costs a sixth of the server's CPU. A buffer is reused
// only when nothing can still read it, which Get and Lease tell apart:
//
//   - Get hands a block out for good: its buffer is never reused, and the
//     garbage collector frees it once the cache and every holder let go.
//   - Lease hands it out until the Lease is released (once, after the
//     bytes were last read: for a FUSE reply, once the kernel has copied
//     them). A block whose every lease is released may be reused when it
//     leaves the cache.
//
// The buffers reused are, in this order, those of blocks a reader said it
// has had whole (Consumed), oldest first, and, when the cache is full, that
// of the least recently used block, which the new one would evict anyway.
// A reused buffer is cleared before it is computed into, so a computation
// sees what it would in fresh memory.
package blockcache

import (
	"container/list"
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
	Reused    int64 `json:"blocks_reused"` // computed into a buffer the cache held already
	Bytes     int64 `json:"cached_bytes"`
	Budget    int64 `json:"budget_bytes"`
	Blocks    int64 `json:"cached_blocks"`
	InFlight  int64 `json:"in_flight"`
}

// Cache is an LRU of computed blocks with a byte budget.
type Cache struct {
	budget int64

	mu      sync.Mutex
	lru     *lru.LRU[Key, *block]
	used    int64
	flights map[Key]*flight
	// consumed holds the cached blocks a reader has had whole, oldest
	// first: their buffers are the first reused.
	consumed list.List
	ids      map[string]*idProgress // what became of each ID's blocks

	workers chan struct{} // read-ahead slots
	// computing bounds the computations running at once, readers' and
	// read-ahead alike, so scratch memory stays bounded however many
	// readers the kernel sends.
	computing chan struct{}
	wg        sync.WaitGroup
	ctx       context.Context // cancelled by Close
	stop      context.CancelFunc

	hits, misses, computed, shared, readAhead, canceled, errs, reused atomic.Int64
}

// block is a computed block and what may still read its buffer; all but
// key and data are guarded by Cache.mu.
type block struct {
	key  Key
	data []byte
	// leases counts the Leases not yet released.
	leases int
	// given says Get handed the block out: its buffer is never reused.
	given bool
	// consumed is its element of Cache.consumed, or nil.
	consumed *list.Element
}

// size is the memory b holds: its buffer's capacity.
func (b *block) size() int64 { return int64(cap(b.data)) }

// reusable reports whether nothing but the cache can read b's buffer; c.mu
// is held.
func (b *block) reusable() bool { return b.leases == 0 && !b.given }

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
	blk     *block // set, with err, before done is closed
	err     error
	waiters int // readers still interested; guarded by Cache.mu
	cancel  context.CancelFunc
	// leases counts the waiters that are Leases and given says a waiter
	// is a Get: the block's leases and given are settled when the flight
	// finishes, under Cache.mu, so that no waiter holds a buffer the cache
	// does not know is held.
	leases int
	given  bool
}

// finished reports whether f's blk or err is set; Cache.mu is held.
func (f *flight) finished() bool { return f.blk != nil || f.err != nil }

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
	c.lru, _ = lru.NewLRU[Key, *block](1<<30, nil)
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c
}

// Budget is the most bytes of blocks the cache keeps.
func (c *Cache) Budget() int64 { return c.budget }

// Get returns the n-byte block named by k, computing it if it is not cached.
// The returned slice is shared and must not be modified; its bytes stay the
// block's for as long as the caller keeps it. If ctx ends before the block
// is ready, Get returns ctx's error; the computation itself stops only when
// no other reader waits for it.
func (c *Cache) Get(ctx context.Context, k Key, n int, compute Compute) ([]byte, error) {
	b, err := c.acquire(ctx, k, n, compute, false)
	if err != nil {
		return nil, err
	}
	return b.data, nil
}

// A Lease holds a block's bytes (Bytes) until Release: the cache reuses
// the buffer for another block only after that. The zero Lease holds
// nothing.
type Lease struct {
	c *Cache
	b *block
}

// Bytes are the block's bytes, shared and not to be modified, and valid
// until Release.
func (l Lease) Bytes() []byte {
	if l.b == nil {
		return nil
	}
	return l.b.data
}

// Release lets the cache reuse the block's buffer: it must be called once,
// after the bytes were last read. Releasing the zero Lease does nothing.
func (l Lease) Release() {
	if l.b == nil {
		return
	}
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.release(l.b)
}

// release counts a lease of b out; c.mu is held.
func (c *Cache) release(b *block) {
	if b.leases <= 0 {
		panic("blockcache: a Lease released more often than it was taken")
	}
	b.leases--
}

// Lease returns the n-byte block named by k, as Get does, held until the
// Lease is released. It never returns a Lease and an error together.
func (c *Cache) Lease(ctx context.Context, k Key, n int, compute Compute) (Lease, error) {
	b, err := c.acquire(ctx, k, n, compute, true)
	if err != nil {
		return Lease{}, err
	}
	return Lease{c, b}, nil
}

// Consumed says a reader has had block k whole and is not expected to ask
// for it again (the kernel's page cache holds what a FUSE reader had): it
// stays cached, for other readers, until its buffer is wanted for a new
// block, before any block no reader has had yet.
func (c *Cache) Consumed(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.lru.Peek(k); ok && b.consumed == nil {
		b.consumed = c.consumed.PushBack(b)
	}
}

// acquire is Get (lease false) and Lease.
func (c *Cache) acquire(ctx context.Context, k Key, n int, compute Compute, lease bool) (*block, error) {
	c.mu.Lock()
	if b, ok := c.lru.Get(k); ok {
		if lease {
			b.leases++
		} else {
			b.given = true
		}
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
	if lease {
		f.leases++
	} else {
		f.given = true
	}
	c.mu.Unlock()
	c.misses.Add(1)

	select {
	case <-f.done:
		return f.blk, f.err
	case <-ctx.Done():
		c.leave(k, f, lease)
		return nil, ctx.Err()
	}
}

// leave counts a waiter of flight f of k out and stops the work when it
// was the last. A lease waiting on f is counted out of f, or, if f has
// finished (and counted it in its block), released.
func (c *Cache) leave(k Key, f *flight, lease bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lease {
		switch {
		case !f.finished():
			f.leases--
		case f.err == nil:
			c.release(f.blk)
		}
	}
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
			c.leave(k, f, false)
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
		var b *block
		select {
		case c.computing <- struct{}{}:
			buf := c.buffer(n)
			err = compute(ctx, buf)
			<-c.computing
			if err == nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			if err == nil {
				b = &block{key: k, data: buf}
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
		c.mu.Lock()
		if c.flights[k] == f {
			delete(c.flights, k)
		}
		if err == nil {
			b.leases, b.given = f.leases, f.given
			c.computedOnce(k)
			c.add(b)
		}
		f.blk, f.err = b, err
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
// served but not kept. A block counts its buffer's capacity, which a
// reused buffer may hold beyond the block's bytes.
func (c *Cache) add(b *block) {
	if b.size() > c.budget {
		return
	}
	if old, ok := c.lru.Peek(b.key); ok {
		c.remove(old)
	}
	c.lru.Add(b.key, b)
	c.used += b.size()
	c.ids[b.key.ID].resident++
	for c.used > c.budget {
		_, old, ok := c.lru.GetOldest()
		if !ok {
			break
		}
		c.remove(old)
	}
}

// remove takes a cached block out; c.mu is held.
func (c *Cache) remove(b *block) {
	c.lru.Remove(b.key)
	if b.consumed != nil {
		c.consumed.Remove(b.consumed)
		b.consumed = nil
	}
	c.used -= b.size()
	c.ids[b.key.ID].resident--
}

// buffer returns a cleared buffer of n bytes for a new block: that of a
// block no one can read any more (see the package doc) when one fits,
// else fresh memory.
func (c *Cache) buffer(n int) []byte {
	c.mu.Lock()
	b := c.reclaim(n)
	c.mu.Unlock()
	if b != nil {
		c.reused.Add(1)
		clear(b)
		return b
	}
	b = make([]byte, n)
	populate(b)
	return b
}

// reclaim takes out of the cache a block whose buffer can hold n bytes and
// that nothing but the cache can read, and returns its buffer, or nil:
// the oldest consumed block, or, if adding n bytes would evict, the least
// recently used one. Only a few candidates are looked at, and only
// buffers of up to an eighth more than n bytes are taken, so that a small
// block does not keep a large buffer. A consumed block passed over goes
// to the back of the line (one Get handed out leaves it), so that blocks
// held long, or of other sizes, do not keep the others from being
// reused. c.mu is held.
func (c *Cache) reclaim(n int) []byte {
	fits := func(b *block) bool { return b.reusable() && cap(b.data) >= n && cap(b.data)-n <= n/8 }
	for range reclaimLooks {
		e := c.consumed.Front()
		if e == nil {
			break
		}
		b := e.Value.(*block)
		switch {
		case fits(b):
			c.remove(b)
			return b.data[:n]
		case b.given:
			c.consumed.Remove(e)
			b.consumed = nil
		default:
			c.consumed.MoveToBack(e)
		}
	}
	if c.used+int64(n) > c.budget {
		if _, b, ok := c.lru.GetOldest(); ok && fits(b) {
			c.remove(b)
			return b.data[:n]
		}
	}
	return nil
}

// reclaimLooks is how many consumed blocks reclaim looks at: those still
// leased are mostly the newest few, as replies are sent in order.
const reclaimLooks = 8

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
		Errors: c.errs.Load(), Reused: c.reused.Load(), Bytes: used, Budget: c.budget, Blocks: blocks, InFlight: inflight,
	}
}

// Close cancels every computation and waits for them to return, so no
// goroutine outlives the cache.
func (c *Cache) Close() {
	c.stop()
	c.wg.Wait()
}

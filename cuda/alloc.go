package cuda

import "math/bits"

// allocator keeps freed device blocks for reuse, by size class, as the
// frameworks' caching allocators do. The model allocates and frees buffers
// for every matrix it runs; cuMemAlloc and cuMemFree are slow and cuMemFree
// waits for the device. A block freed while queued operations still use
// it is safe to hand out again: every operation runs on the backend's one
// stream, so the next user's work is queued after them.
type allocator struct {
	free   map[uint64][]uint64 // size class in bytes → free blocks
	cached uint64              // bytes held in free
}

// sizeClass rounds a request up to a power of two of at least 512 bytes,
// so that the varying row counts of expert batches share blocks.
func sizeClass(n uint64) uint64 {
	if n <= 512 {
		return 512
	}
	return 1 << bits.Len64(n-1)
}

// take returns a cached block of class c, or 0.
func (a *allocator) take(c uint64) uint64 {
	l := a.free[c]
	if len(l) == 0 {
		return 0
	}
	p := l[len(l)-1]
	a.free[c] = l[:len(l)-1]
	a.cached -= c
	return p
}

// put caches block p of class c.
func (a *allocator) put(p, c uint64) {
	if a.free == nil {
		a.free = make(map[uint64][]uint64)
	}
	a.free[c] = append(a.free[c], p)
	a.cached += c
}

// drain removes and returns every cached block.
func (a *allocator) drain() []uint64 {
	var all []uint64
	for c, l := range a.free {
		all = append(all, l...)
		delete(a.free, c)
	}
	a.cached = 0
	return all
}

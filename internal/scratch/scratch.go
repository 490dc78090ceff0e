// Package scratch lends byte buffers to work whose size is known only when
// it starts: a derived block's source rows or side outputs, a source read
// that cannot be mapped. Reusing them keeps a hot path from allocating per
// call: a compute function that allocated its buffers for every block made
// a first read of engram-fp4/ allocate four bytes per byte it served.
package scratch

import "sync"

// pool holds the buffers Get lends.
var pool = sync.Pool{New: func() any { return new([]byte) }}

// Get lends n bytes, and the buffer to give back with Put once they are no
// longer used. The bytes are not cleared: the caller writes them before it
// reads them.
func Get(n int64) (*[]byte, []byte) {
	p := pool.Get().(*[]byte)
	if int64(cap(*p)) < n {
		*p = make([]byte, n)
	}
	return p, (*p)[:n]
}

// Put gives back a buffer Get lent; nothing of it may be used afterwards.
func Put(p *[]byte) { pool.Put(p) }

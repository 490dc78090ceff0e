package vfile

import (
	"context"
	"sync"
)

// Doc is a generated document (JSON or Markdown report) computed whole the
// first time it is read and kept for the life of the mount.
type Doc struct {
	generate func(ctx context.Context) ([]byte, error)

	dynamic bool // regenerated on every read (live status)
	headers bool // follows from the headers: cheap enough to generate when stat'ed

	mu      sync.Mutex
	data    []byte
	done    bool
	running *generation // the generation in progress, if any
}

// generation is one run of a Doc's generate function that readers wait for.
type generation struct {
	done    chan struct{}
	data    []byte
	err     error
	waiters int // readers still waiting; guarded by Doc.mu
	cancel  context.CancelFunc
}

// NewDoc returns a document produced by generate.
func NewDoc(generate func(ctx context.Context) ([]byte, error)) *Doc {
	return &Doc{generate: generate}
}

// NewHeaderDoc returns a document that follows from the headers alone
// (plan.json, a README): cheap enough to generate when its size is first
// asked for, so that it has its exact size from the first stat.
func NewHeaderDoc(generate func(ctx context.Context) ([]byte, error)) *Doc {
	return &Doc{generate: generate, headers: true}
}

// NewDynamicDoc returns a document generated afresh on every read, such as
// live status; its size is never known in advance.
func NewDynamicDoc(generate func(ctx context.Context) ([]byte, error)) *Doc {
	return &Doc{generate: generate, dynamic: true}
}

// Bytes returns the document, generating it on first use. Readers arriving
// while it is generated wait for that one generation; each may give up when
// its ctx ends, and the generation is cancelled only when none waits any
// more. A failed or cancelled generation is not kept, so the next read
// tries again.
func (d *Doc) Bytes(ctx context.Context) ([]byte, error) {
	if d.dynamic {
		return d.generate(ctx)
	}
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return d.data, nil
	}
	g := d.running
	if g == nil {
		g = d.start(ctx)
	}
	g.waiters++
	d.mu.Unlock()

	select {
	case <-g.done:
		return g.data, g.err
	case <-ctx.Done():
		d.mu.Lock()
		g.waiters--
		if g.waiters == 0 {
			// Nobody wants the document any more: stop the work, and let the
			// next reader start afresh rather than join a dying generation.
			g.cancel()
			if d.running == g {
				d.running = nil
			}
		}
		d.mu.Unlock()
		return nil, ctx.Err()
	}
}

// start launches a generation; d.mu is held. The generation keeps ctx's
// values but not its cancellation, which belongs to the waiters together.
func (d *Doc) start(ctx context.Context) *generation {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g := &generation{done: make(chan struct{}), cancel: cancel}
	d.running = g
	go func() {
		defer cancel()
		data, err := d.generate(gctx)
		if err == nil && gctx.Err() != nil {
			err = gctx.Err()
		}
		d.mu.Lock()
		if d.running == g {
			d.running = nil
		}
		if err == nil {
			d.data, d.done = data, true
		}
		g.data, g.err = data, err
		d.mu.Unlock()
		close(g.done)
	}()
	return g
}

// Live reports whether the document is generated afresh on every read.
func (d *Doc) Live() bool { return d.dynamic }

// FromHeaders reports whether the document follows from the headers, so
// that it may be generated to answer a stat.
func (d *Doc) FromHeaders() bool { return d.headers }

// Size returns the document's size once it has been generated.
func (d *Doc) Size() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int64(len(d.data)), d.done
}

package views

import (
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tensorfile"
)

// rewrittenSet memoises, for the views of a set, each rewriter and what it
// makes of each shard: nvfp4/ and nvfp4+engram-fp4/ share the NVFP4
// experts' tensors (names, shapes, block computations) instead of making
// them twice, and the views that apply it may be built concurrently.
type rewrittenSet struct {
	mu     sync.Mutex
	byName map[string]*rewritten
	errs   map[string]error // why a rewriter could not be made
}

// rewritten is one rewriter and what it made of the shards so far.
type rewritten struct {
	rw     Rewriter
	shards []shardClaims // by index in the catalog's Shards
}

// shardClaims are the tensors of one shard a rewriter claims.
type shardClaims struct {
	once   sync.Once
	claims []claim // by tensor of the shard; nil when it claims none
}

// claim is what a rewriter made of a tensor it claimed (ok): the tensors
// that replace it, none to drop it.
type claim struct {
	outs []tensorfile.Out
	ok   bool
}

// get returns the rewriter r makes for s, made once per set.
func (m *rewrittenSet) get(s *Set, r rewrites) (*rewritten, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rw, ok := m.byName[r.name]; ok {
		return rw, m.errs[r.name]
	}
	rw, err := r.make(s)
	if err != nil {
		m.byName[r.name], m.errs[r.name] = nil, err // made once, failed or not
		return nil, err
	}
	x := &rewritten{rw: rw, shards: make([]shardClaims, len(s.Cat.Shards))}
	m.byName[r.name] = x
	return x, nil
}

// shard returns the rewriter's claims on sh, the catalog's shard i,
// making them the first time.
func (r *rewritten) shard(i int, sh *checkpoint.Shard) []claim {
	c := &r.shards[i]
	c.once.Do(func() {
		for j, t := range sh.Tensors {
			outs, ok := r.rw.Rewrite(t)
			if !ok {
				continue
			}
			if c.claims == nil {
				c.claims = make([]claim, len(sh.Tensors))
			}
			c.claims[j] = claim{outs: outs, ok: true}
		}
	})
	return c.claims
}

package inventory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
)

// DefaultTP is the tensor-parallel degree whose cuts records show unless
// told otherwise.
const DefaultTP = 2

// Options configure an Inventory.
type Options struct {
	// TP is the tensor-parallel degree of the cuts in the records: 0 means
	// DefaultTP, 1 shows none.
	TP int
	// NoHash reads headers only: records carry no digest and no checks.
	NoHash bool
	// Workers is how many tensors are read at once; 0 means GOMAXPROCS.
	Workers int
	// Cache, if set, keeps digests and checks across runs.
	Cache *Cache
	// Progress, if set, counts the bytes read; otherwise the Inventory
	// keeps its own.
	Progress *Progress
}

// Inventory computes the records of a catalog's tensors, reading each
// tensor's data once, on first use, and keeping the result.
type Inventory struct {
	cat    *checkpoint.Catalog
	opt    Options
	byPath map[string]*checkpoint.Shard

	mu       sync.Mutex // held by each computation, which uses every worker
	done     map[*checkpoint.Tensor]scanned
	tried    map[*checkpoint.Shard]bool // the cache was consulted
	scanners []*scanner
}

// New returns an inventory of cat. It reads nothing until asked for
// records.
func New(cat *checkpoint.Catalog, opt Options) *Inventory {
	if opt.TP == 0 {
		opt.TP = DefaultTP
	}
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.Progress == nil {
		opt.Progress = new(Progress)
	}
	inv := &Inventory{cat: cat, opt: opt, byPath: make(map[string]*checkpoint.Shard),
		done: make(map[*checkpoint.Tensor]scanned), tried: make(map[*checkpoint.Shard]bool)}
	for _, s := range cat.Shards {
		inv.byPath[s.Path] = s
	}
	return inv
}

// Catalog is the catalog the inventory describes.
func (inv *Inventory) Catalog() *checkpoint.Catalog { return inv.cat }

// Progress is the inventory's progress counter.
func (inv *Inventory) Progress() *Progress { return inv.opt.Progress }

// Records returns the records of the tensors of the named shards (every
// shard when none is named), in name order, reading and checking the data
// of each tensor the first time. A tensor whose data cannot be read gets
// its Error set; ctx ends the reading early with ctx's error, keeping what
// was done for the next call.
func (inv *Inventory) Records(ctx context.Context, shards ...string) ([]Record, error) {
	want, err := inv.shards(shards)
	if err != nil {
		return nil, err
	}
	errs, err := inv.compute(ctx, want)
	if err != nil {
		return nil, err
	}
	in := make(map[*checkpoint.Shard]bool, len(want))
	for _, s := range want {
		in[s] = true
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var recs []Record
	for _, t := range inv.cat.Tensors {
		if !in[t.Shard] {
			continue
		}
		r := header(inv.cat, t, inv.opt.TP)
		if d, ok := inv.done[t]; ok {
			r.SHA256, r.Values = d.sha, d.values
		} else if e := errs[t]; e != nil {
			r.Error = e.Error()
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// shards resolves shard names; none means all.
func (inv *Inventory) shards(names []string) ([]*checkpoint.Shard, error) {
	if len(names) == 0 {
		return inv.cat.Shards, nil
	}
	var out []*checkpoint.Shard
	for _, n := range names {
		s := inv.cat.Shard(n)
		if s == nil {
			return nil, fmt.Errorf("no valid shard %q in %s", n, inv.cat.Dir)
		}
		out = append(out, s)
	}
	return out, nil
}

// job is one tensor to read.
type job struct {
	t     *checkpoint.Tensor
	unfit bool
}

// compute reads every tensor of shards not read yet, on all workers,
// largest first so that the longest tensor does not start last. It
// returns the tensors that could not be read.
func (inv *Inventory) compute(ctx context.Context, shards []*checkpoint.Shard) (map[*checkpoint.Tensor]error, error) {
	if inv.opt.NoHash {
		return nil, nil
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var jobs []job
	for _, s := range shards {
		cached := inv.fromCache(s)
		for _, t := range s.Tensors {
			if _, ok := inv.done[t]; ok {
				continue
			}
			unfit := unfitScale(inv.cat, t) != nil
			if e, ok := cached[t.Name]; ok && e.usable(t, unfit) {
				inv.done[t] = scanned{sha: e.SHA256, values: e.Values}
				inv.opt.Progress.cached.Add(1)
				continue
			}
			jobs = append(jobs, job{t, unfit})
		}
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(b.t.Size, a.t.Size) })
	results := make([]scanned, len(jobs))
	errs := make([]error, len(jobs))
	for i := range errs {
		errs[i] = context.Canceled // until the job runs
	}
	var total int64
	for _, j := range jobs {
		total += j.t.Size
	}
	p := inv.opt.Progress
	p.begin(total)
	next := make(chan int)
	var wg sync.WaitGroup
	workers := min(inv.opt.Workers, len(jobs))
	for w := range workers {
		if w == len(inv.scanners) {
			inv.scanners = append(inv.scanners, newScanner(p))
		}
		sc := inv.scanners[w]
		sc.read = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = sc.scan(ctx, jobs[i].t, jobs[i].unfit)
				if errs[i] == nil {
					p.tensors.Add(1)
				}
			}
		}()
	}
	for i := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	read := int64(0)
	for _, sc := range inv.scanners[:workers] {
		read += sc.read
	}
	p.end(total - read)

	failed := make(map[*checkpoint.Tensor]error)
	dirty := make(map[*checkpoint.Shard]bool)
	for i, j := range jobs {
		switch {
		case errs[i] == nil:
			inv.done[j.t] = results[i]
			dirty[j.t.Shard] = true
		case errors.Is(errs[i], context.Canceled), errors.Is(errs[i], context.DeadlineExceeded):
		default:
			failed[j.t] = errs[i]
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, s := range shards {
		if dirty[s] {
			inv.store(s, failed)
		}
	}
	return failed, nil
}

// fromCache returns the cache's entries for shard s the first time it is
// asked, nil after.
func (inv *Inventory) fromCache(s *checkpoint.Shard) map[string]cacheEntry {
	if inv.opt.Cache == nil || inv.tried[s] {
		return nil
	}
	inv.tried[s] = true
	return inv.opt.Cache.load(s, inv.byPath)
}

// store writes the records of shard s to the cache if every tensor of it
// was read: a shard with a tensor that failed is left out, so the failure
// is retried rather than remembered. Writing is best effort (a full disk
// costs the next run time, not this one its result); the last failure is
// shown in the progress counters.
func (inv *Inventory) store(s *checkpoint.Shard, failed map[*checkpoint.Tensor]error) {
	if inv.opt.Cache == nil {
		return
	}
	entries := make([]cacheEntry, 0, len(s.Tensors))
	var deps []*checkpoint.Shard
	for _, t := range s.Tensors {
		d, ok := inv.done[t]
		if !ok || failed[t] != nil {
			return
		}
		unfit := unfitScale(inv.cat, t) != nil
		entries = append(entries, cacheEntry{Name: t.Name, Offset: t.Offset, NBytes: t.Size,
			Check: checkOf(t, unfit), SHA256: d.sha, Values: d.values})
		if t.Scale != nil && t.Scale.Shard != s && !slices.Contains(deps, t.Scale.Shard) {
			deps = append(deps, t.Scale.Shard)
		}
	}
	if err := inv.opt.Cache.store(s, deps, entries); err != nil {
		inv.opt.Progress.cacheErr.Store(err.Error())
	}
}

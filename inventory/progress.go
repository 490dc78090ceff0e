package inventory

import (
	"sync"
	"sync/atomic"
	"time"
)

// Progress counts the bytes an Inventory reads, for a status file or a
// progress bar. Several inventories may share one. It is safe for
// concurrent use, and the zero value is ready.
type Progress struct {
	total, done, tensors, cached atomic.Int64
	cacheErr                     atomic.Value // string

	mu      sync.Mutex
	running int           // passes under way
	since   time.Time     // start of the current busy period
	busy    time.Duration // length of the finished busy periods
}

// ProgressSnapshot is Progress at one moment.
type ProgressSnapshot struct {
	// TotalBytes is the tensor data the passes so far set out to read;
	// HashedBytes how much of it they have read.
	TotalBytes  int64 `json:"total_bytes"`
	HashedBytes int64 `json:"hashed_bytes"`
	// Tensors counts the tensors read; CachedTensors those whose digest
	// and checks came from the cache instead.
	Tensors       int64 `json:"tensors"`
	CachedTensors int64 `json:"cached_tensors"`
	Running       bool  `json:"running"`
	// RateMBps is HashedBytes over the time spent reading, in MB/s.
	RateMBps float64 `json:"rate_mb_s"`
	// ETASeconds is the time left at that rate, while running.
	ETASeconds *float64 `json:"eta_seconds"`
	// CacheError is the last failure to write the cache, if any.
	CacheError string `json:"cache_error,omitempty"`
}

// begin starts a pass that will read total bytes.
func (p *Progress) begin(total int64) {
	p.total.Add(total)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == 0 {
		p.since = time.Now()
	}
	p.running++
}

// end ends a pass; what it did not read leaves the total.
func (p *Progress) end(unread int64) {
	p.total.Add(-unread)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running--
	if p.running == 0 {
		p.busy += time.Since(p.since)
	}
}

func (p *Progress) add(n int64) { p.done.Add(n) }

// Snapshot returns the counters now.
func (p *Progress) Snapshot() ProgressSnapshot {
	p.mu.Lock()
	busy, running := p.busy, p.running > 0
	if running {
		busy += time.Since(p.since)
	}
	p.mu.Unlock()
	s := ProgressSnapshot{
		TotalBytes: p.total.Load(), HashedBytes: p.done.Load(),
		Tensors: p.tensors.Load(), CachedTensors: p.cached.Load(), Running: running,
	}
	s.CacheError, _ = p.cacheErr.Load().(string)
	if busy > 0 {
		s.RateMBps = float64(s.HashedBytes) / busy.Seconds() / 1e6
	}
	if running && s.RateMBps > 0 {
		eta := float64(s.TotalBytes-s.HashedBytes) / (s.RateMBps * 1e6)
		s.ETASeconds = &eta
	}
	return s
}

package objstore

import "sync/atomic"

// Stats counts a Bucket's work since Open.
type Stats struct {
	Requests       int64 `json:"requests"`         // HTTP requests sent, every attempt of HEAD, LIST and GET
	Gets           int64 `json:"gets"`             // GET attempts among them
	BytesFetched   int64 `json:"bytes_fetched"`    // object bytes received by GETs
	BytesPut       int64 `json:"bytes_put"`        // object bytes sent by PUTs (a shared cache's blocks)
	Retries        int64 `json:"retries"`          // attempts after a failed one
	Errors         int64 `json:"errors"`           // requests that failed for good, after their retries
	CacheHitBytes  int64 `json:"cache_hit_bytes"`  // bytes read served from chunk files
	CacheMissBytes int64 `json:"cache_miss_bytes"` // bytes read that waited for a GET, a reader's own or a prefetch's
	ReadWaits      int64 `json:"read_waits"`       // chunk reads that waited for a GET
	Prefetched     int64 `json:"prefetched_bytes"` // bytes fetched ahead of the readers
	// PrefetchUnused counts bytes fetched ahead whose chunk was evicted
	// before any read; those still cached and unread are not counted.
	PrefetchUnused int64 `json:"prefetch_unused_bytes"`
	CorruptChunks  int64 `json:"corrupt_chunks"` // damaged chunk files found, deleted and fetched again
	Evictions      int64 `json:"evictions"`      // chunk files deleted to keep within CacheBytes
	CachedBytes    int64 `json:"cached_bytes"`   // size of the chunk files now cached
}

// counters are the live counts behind Stats.
type counters struct {
	requests, gets, bytesFetched, retries, errors atomic.Int64
	bytesPut                                      atomic.Int64
	hit, miss, waits, prefetched, prefetchUnused  atomic.Int64
	corrupt, evictions                            atomic.Int64
}

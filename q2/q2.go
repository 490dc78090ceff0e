// Package q2 is the engine of the q2/ view: from a catalog's headers it
// plans what becomes of every tensor (quantised to ggml IQ2_XXS or Q2_K,
// copied, dropped, left external or skipped), lays out one output shard per
// source shard, computes the quantised blocks (through the disk cache when
// there is one) and writes the documents: plan.json, the shards' digests
// (NAME.manifest.json and manifest.json) and README.md (FORMATS.md "q2/"). The view (package views)
// only puts its files in a tree; `dsfs verify q2` and `dsfs audit q2`
// (package q2check) use it directly.
package q2

import (
	"runtime"

	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/vfile"
)

// Options are what a plan needs beyond the catalog.
type Options struct {
	// DiskCache keeps quantised blocks and finished shard digests
	// across mounts; nil for none.
	DiskCache *diskcache.Cache
	// Cache is the block cache the view's files are read through, so that
	// a shard's digests hash the blocks a reader computed, and the other
	// way round; nil to compute every block it hashes.
	Cache vfile.Cache
	// Revision names the source revision in the documents; empty to take
	// it from a Hugging Face cache path.
	Revision string
}

// workers is how many goroutines a whole-checkpoint pass uses.
func workers() int { return runtime.GOMAXPROCS(0) }

// Package q2check checks the q2/ view from outside: Verify recomputes
// sampled blocks and compares them with an exported q2 directory or a disk
// cache directory and with their recorded digests; Audit measures how far
// the dequantised blocks are from the exact MXFP4 decode.
package q2check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/vfile"
)

// Progress is told how much of a job is done, in the job's own units.
type Progress func(done, total int64)

// maxFailures is how many failures a report spells out; the counts hold
// them all.
const maxFailures = 20

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Against string `json:"against"`
	Kind    string `json:"kind"` // "export" or "cache"
	Seed    uint64 `json:"seed"`
	// Blocks is the number of quantised blocks in the view; Sampled how
	// many were recomputed.
	Blocks  int64 `json:"blocks"`
	Sampled int64 `json:"sampled"`
	Match   int64 `json:"match"`
	Differ  int64 `json:"differ"`
	// Absent counts sampled blocks a cache directory does not hold (not a
	// failure: a cache holds what was read); Corrupt those whose entry
	// fails its checks.
	Absent  int64 `json:"absent"`
	Corrupt int64 `json:"corrupt"`
	// Digests counts the recorded digests checked, DigestsDiffer those
	// that did not match the bytes.
	Digests       int64    `json:"digests"`
	DigestsDiffer int64    `json:"digests_differ"`
	Failures      []string `json:"failures"`
	failed        int64
}

// OK reports whether nothing failed.
func (r *VerifyReport) OK() bool { return r.failed == 0 }

func (r *VerifyReport) fail(format string, a ...any) {
	r.failed++
	if len(r.Failures) < maxFailures {
		r.Failures = append(r.Failures, fmt.Sprintf(format, a...))
	}
}

// block is one block of a quantised tensor.
type block struct {
	t *q2.Tensor
	i int64
}

// Verify recomputes sample blocks of q's quantised tensors (all of them
// when sample is 0), chosen at random from seed, and compares them with
// dir: an exported q2 directory (then the digests its NAME.manifest.json
// files record are checked too: for the tensors holding a sampled block, or
// every tensor when sample is 0) or a disk cache directory (then each
// sampled block's entry is looked up by its key and checked). q must be
// planned without a disk cache, so that every block is recomputed.
func Verify(ctx context.Context, q *q2.Plan, dir string, sample int64, seed uint64, progress Progress) (*VerifyReport, error) {
	r := &VerifyReport{Against: dir, Seed: seed, Failures: []string{}}
	switch {
	case diskcache.IsCache(dir):
		r.Kind = "cache"
	case isExport(dir):
		r.Kind = "export"
	default:
		return nil, fmt.Errorf("%s: neither an exported q2 directory (no plan.json or quant-*.safetensors) nor a dsfs disk cache (no %s)", dir, diskcache.Marker)
	}
	var all []block
	for _, t := range q.Quantised() {
		for i := range t.Blocks.Count() {
			all = append(all, block{t, i})
		}
	}
	r.Blocks = int64(len(all))
	picked := all
	if sample > 0 && sample < int64(len(all)) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		picked = all[:sample]
	}
	r.Sampled = int64(len(picked))
	var err error
	if r.Kind == "cache" {
		err = verifyCache(ctx, r, dir, picked, progress)
	} else {
		err = verifyExport(ctx, r, q, dir, picked, sample == 0, progress)
	}
	return r, err
}

func isExport(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "plan.json")); err == nil {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "quant-*.safetensors"))
	return len(m) > 0
}

// recompute quantises block b from the source.
func recompute(ctx context.Context, b block) ([]byte, diskcache.Key, error) {
	lo, hi := b.t.BlockRows(b.i)
	w, sc, err := b.t.ReadSource(lo, hi)
	if err != nil {
		return nil, diskcache.Key{}, err
	}
	dst := make([]byte, (hi-lo)*b.t.RowBytes())
	if err := b.t.Quantise(ctx, w, sc, dst); err != nil {
		return nil, diskcache.Key{}, err
	}
	return dst, b.t.BlockKey(w, sc), nil
}

func verifyCache(ctx context.Context, r *VerifyReport, dir string, picked []block, progress Progress) error {
	c, err := diskcache.Open(dir, 0, nil)
	if err != nil {
		return err
	}
	for n, b := range picked {
		want, k, err := recompute(ctx, b)
		if err != nil {
			return err
		}
		got, err := c.Lookup(k)
		var ce *diskcache.CorruptError
		switch {
		case errors.Is(err, diskcache.ErrNotFound):
			r.Absent++
		case errors.As(err, &ce):
			r.Corrupt++
			r.fail("%s block %d: %v", b.t.Name, b.i, err)
		case err != nil:
			return err
		case bytes.Equal(got, want):
			r.Match++
		default:
			r.Differ++
			r.fail("%s block %d: cache entry %s differs from the recomputed block", b.t.Name, b.i, k)
		}
		if progress != nil {
			progress(int64(n+1), int64(len(picked)))
		}
	}
	return nil
}

func verifyExport(ctx context.Context, r *VerifyReport, q *q2.Plan, dir string, picked []block, everyDigest bool, progress Progress) error {
	files := make(map[*q2.Shard]*os.File)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	shardOf := make(map[*q2.Tensor]*q2.Shard)
	for _, sh := range q.Shards {
		for _, t := range sh.Tensors {
			shardOf[t] = sh
		}
		p := filepath.Join(dir, filepath.FromSlash(sh.Name))
		f, err := os.Open(p)
		if err != nil {
			r.fail("%s: %v", sh.Name, err)
			continue
		}
		files[sh] = f
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.Size() != sh.File.Size() {
			r.fail("%s: %d bytes, the view has %d", sh.Name, fi.Size(), sh.File.Size())
		}
		hdr := make([]byte, len(sh.Header()))
		if _, err := f.ReadAt(hdr, 0); err != nil || !bytes.Equal(hdr, sh.Header()) {
			r.fail("%s: header differs from the view's layout", sh.Name)
		}
	}
	touched := make(map[*q2.Tensor]bool)
	for n, b := range picked {
		f := files[shardOf[b.t]]
		if f == nil {
			continue // reported above
		}
		want, _, err := recompute(ctx, b)
		if err != nil {
			return err
		}
		lo, _ := b.t.BlockRows(b.i)
		got := make([]byte, len(want))
		if _, err := f.ReadAt(got, b.t.Offset+lo*b.t.RowBytes()); err != nil {
			r.fail("%s block %d: %v", b.t.Name, b.i, err)
		} else if bytes.Equal(got, want) {
			r.Match++
		} else {
			r.Differ++
			r.fail("%s block %d: exported bytes differ from the recomputed block", b.t.Name, b.i)
		}
		touched[b.t] = true
		if progress != nil {
			progress(int64(n+1), int64(len(picked)))
		}
	}
	for sh, f := range files {
		m, err := readShardDigests(filepath.Join(dir, filepath.FromSlash(sh.Name)+".manifest.json"))
		if err != nil {
			r.fail("%s: %v", sh.Name, err)
			continue
		}
		recorded := make(map[string]q2.TensorDigest, len(m.Tensors))
		for _, mt := range m.Tensors {
			recorded[mt.Name] = mt
		}
		for _, t := range sh.Tensors {
			if !everyDigest && !touched[t] {
				continue
			}
			mt, ok := recorded[t.Name]
			if !ok {
				r.fail("%s: %s is not in the shard manifest", sh.Name, t.Name)
				continue
			}
			got, err := vfile.SHA256(ctx, f, t.Offset, t.Size)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", sh.Name, t.Name, err)
			}
			r.Digests++
			if got != mt.OutputSHA256 {
				r.DigestsDiffer++
				r.fail("%s: tensor %s: bytes hash to %s, the manifest records %s", sh.Name, t.Name, got, mt.OutputSHA256)
			}
			if t.Type == nil && mt.SourceSHA256 != mt.OutputSHA256 {
				r.fail("%s: tensor %s is copied unchanged but its manifest digests differ", sh.Name, t.Name)
			}
		}
	}
	return nil
}

func readShardDigests(p string) (*q2.ShardDigests, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var m q2.ShardDigests
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &m, nil
}

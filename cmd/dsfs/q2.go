package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/objstore"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/q2check"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/views"
)

// q2Flags are the flags of the commands that serve or read q2/.
type q2Flags struct {
	cacheDir, cacheDirLocal string
	cacheGB                 float64
	revision                string

	cacheBucket *objstore.Bucket // the bucket of --cache-dir s3://..., for its stats
}

// close closes the bucket of --cache-dir s3://..., if apply opened one.
func (f *q2Flags) close() {
	if f.cacheBucket != nil {
		f.cacheBucket.Close()
	}
}

// addQ2Flags registers --cache-dir, --cache-dir-local, --cache-dir-gb and
// --revision.
func addQ2Flags(fs *flag.FlagSet) *q2Flags {
	f := &q2Flags{}
	fs.StringVar(&f.cacheDir, "cache-dir", "", "keep computed q2/ blocks and manifest/ digests in this directory across mounts (may be shared by several mounts or hosts), or in a bucket, s3://BUCKET/PREFIX, that a fleet shares")
	fs.StringVar(&f.cacheDirLocal, "cache-dir-local", "", "with --cache-dir s3://...: a local directory in front of the bucket (blocks, digests, and the chunks of a checkpoint read from a bucket)")
	fs.Float64Var(&f.cacheGB, "cache-dir-gb", 200, "cap of the local cache directory in GiB; least recently used blocks are removed past it (0: no cap)")
	fs.StringVar(&f.revision, "revision", "", "source revision q2/ records (default: the Hugging Face snapshot name, else unknown)")
	return f
}

// apply sets the q2/ fields of opt, opening the disk cache: a directory,
// or a bucket with --cache-dir-local in front of it.
func (f *q2Flags) apply(opt *views.Options) error {
	opt.Revision = f.revision
	capBytes := int64(f.cacheGB * (1 << 30))
	switch {
	case objstore.IsURL(f.cacheDir):
		b, err := objstore.Open(context.Background(), f.cacheDir, objstore.Options{})
		if err != nil {
			return err
		}
		c, err := diskcache.OpenShared(b, f.cacheDirLocal, capBytes, nil)
		if err != nil {
			b.Close()
			return err
		}
		opt.DiskCache, f.cacheBucket = c, b
	case f.cacheDirLocal != "":
		return usagef("--cache-dir-local goes with --cache-dir s3://BUCKET/PREFIX; for a local cache give --cache-dir alone")
	case f.cacheDir != "":
		c, err := diskcache.Open(f.cacheDir, capBytes, nil)
		if err != nil {
			return err
		}
		opt.DiskCache = c
	}
	return nil
}

// signalContext is cancelled by Ctrl-C or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// openQ2 opens the checkpoint at dir and plans its q2/ view.
func openQ2(dir string, opt views.Options) (*source, *q2.Plan, error) {
	opt.Views = []string{"q2"}
	src, err := openSource(dir, opt)
	if err != nil {
		return nil, nil, err
	}
	q, err := q2.New(src.cat, q2.Options{DiskCache: opt.DiskCache, Cache: opt.Cache, Revision: opt.Revision})
	if err != nil {
		src.Close()
		return nil, nil, err
	}
	return src, q, nil
}

func runVerify(args []string) error {
	fs := flags("verify")
	against := fs.String("against", "", "an exported q2 directory or a --cache-dir directory (required)")
	sample := fs.Int64("sample", 64, "blocks to recompute, chosen at random (0: every block and every digest)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the random sample")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	if pos[0] != "q2" {
		return usagef("only q2 can be verified, not %q", pos[0])
	}
	if *against == "" {
		return usagef("--against DIR is required")
	}
	src, q, err := openQ2(pos[1], views.Options{})
	if err != nil {
		return err
	}
	defer src.Close()
	ctx, stop := signalContext()
	defer stop()
	bar := newProgress("verify", "blocks")
	r, err := q2check.Verify(ctx, q, *against, *sample, *seed, bar.set)
	bar.finish()
	if err != nil {
		return err
	}
	fmt.Printf("verify q2 against %s (%s): %d of %d blocks recomputed (seed %d): %d match, %d differ, %d absent, %d corrupt; %d digests checked, %d differ\n",
		r.Against, r.Kind, r.Sampled, r.Blocks, r.Seed, r.Match, r.Differ, r.Absent, r.Corrupt, r.Digests, r.DigestsDiffer)
	for _, f := range r.Failures {
		fmt.Println("  " + f)
	}
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, r); err != nil {
			return err
		}
	}
	if !r.OK() {
		return fmt.Errorf("%s does not match the recomputed q2 view", r.Against)
	}
	return nil
}

func runAudit(args []string) error {
	fs := flags("audit")
	jsonOut := fs.String("json", "", "write audit.json to this file")
	sample := fs.Int("sample", 16, "tensors per projection, spread over the checkpoint (0: every tensor)")
	qf := addQ2Flags(fs)
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	if pos[0] != "q2" {
		return usagef("only q2 can be audited, not %q", pos[0])
	}
	var opt views.Options
	if err := qf.apply(&opt); err != nil {
		return err
	}
	defer qf.close() // after the views and caches that write to it, deferred below
	src, q, err := openQ2(pos[1], opt)
	if err != nil {
		return err
	}
	defer src.Close()
	ctx, stop := signalContext()
	defer stop()
	bar := newProgress("audit", "weights")
	r, err := q2check.Audit(ctx, q, *sample, bar.set)
	bar.finish()
	if err != nil {
		return err
	}
	fmt.Printf("audit q2: %d of %d quantised tensors against the exact MXFP4 decode\n", r.Tensors, r.Available)
	fmt.Printf("%-4s %-8s %8s %14s %10s %10s %10s %10s\n", "proj", "type", "tensors", "weights", "cosine", "min cos", "rel rms", "max rel")
	for _, p := range r.Projections {
		fmt.Printf("%-4s %-8s %8d %14d %10.6f %10.6f %10.6f %10.6f\n", p.Projection, p.GGMLType, p.Tensors, p.Weights,
			float64(p.Cosine), float64(p.MinCosine), float64(p.RelRMS), float64(p.MaxRelRMS))
	}
	if *jsonOut != "" {
		return writeJSON(*jsonOut, r)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := vfile.JSON(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

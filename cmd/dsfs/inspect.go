package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/objstore"
	"github.com/dsfs/dsfs/views"
)

// inventoryFlags are the flags of the commands that take stock of a
// checkpoint.
type inventoryFlags struct {
	tp       *int
	noHash   *bool
	cacheDir *string
}

func addInventoryFlags(fs interface {
	Int(string, int, string) *int
	Bool(string, bool, string) *bool
	String(string, string, string) *string
}) inventoryFlags {
	return inventoryFlags{
		tp:       fs.Int("tp", inventory.DefaultTP, "tensor-parallel degree whose cuts the records show (1: none)"),
		noHash:   fs.Bool("no-hash", false, "read headers only: no sha256 and no value checks"),
		cacheDir: fs.String("cache-dir", "", "keep digests and checks in this directory (the mount's --cache-dir) so a second run is instant"),
	}
}

// open opens the checkpoint at dir (a directory or s3://BUCKET/PREFIX)
// and its inventory; done closes them.
func (f inventoryFlags) open(dir string) (inv *inventory.Inventory, done func(), err error) {
	if objstore.IsURL(*f.cacheDir) {
		return nil, nil, usagef("--cache-dir of inspect and diff is a local directory: manifest/'s digests are kept on each host, not in a bucket")
	}
	var chunkDir string
	if *f.cacheDir != "" {
		chunkDir = chunkDirIn(*f.cacheDir)
	}
	cat, bucket, err := openCatalog(dir, chunkDir, 0)
	if err != nil {
		return nil, nil, err
	}
	done = func() {
		cat.Close()
		if bucket != nil {
			bucket.Close()
		}
	}
	opt := inventory.Options{TP: *f.tp, NoHash: *f.noHash}
	if *f.cacheDir != "" {
		if opt.Cache, err = inventory.OpenCache(views.ManifestCacheDir(*f.cacheDir)); err != nil {
			done()
			return nil, nil, err
		}
	}
	return inventory.New(cat, opt), done, nil
}

// interruptible returns a context that SIGINT and SIGTERM cancel.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runInspect(args []string) error {
	fs := flags("inspect")
	jsonOut := fs.String("json", "", "write the full manifest (manifest.json) to this file")
	pngDir := fs.String("png", "", "write manifest/'s figure (bytes.png: the tensor bytes of the checkpoint and of each view, by role and dtype) to this directory")
	shard := fs.String("shard", "", "inspect this shard only (its name as the index gives it)")
	inf := addInventoryFlags(fs)
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	inv, done, err := inf.open(pos[0])
	if err != nil {
		return err
	}
	defer done()
	var shards []string
	if *shard != "" {
		shards = []string{*shard}
	}
	ctx, cancel := interruptible()
	defer cancel()
	bar := watchInventory(inv.Progress())
	m, err := inv.Manifest(ctx, shards...)
	bar.finish()
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeWith(*jsonOut, m.WriteJSON); err != nil {
			return err
		}
	}
	printManifest(os.Stdout, m, inv.Progress().Snapshot())
	if *pngDir != "" {
		if err := writeManifestFigures(ctx, inv.Catalog(), inf, *pngDir); err != nil {
			return err
		}
	}
	if len(m.Problems) > 0 {
		return exitStatus(1)
	}
	return nil
}

// writeManifestFigures writes the figures manifest/ serves for cat below
// dir, from the views built as a mount builds them (headers only).
func writeManifestFigures(ctx context.Context, cat *checkpoint.Catalog, inf inventoryFlags, dir string) error {
	set, err := views.Build(cat, views.Options{Views: []string{"manifest"}, Values: map[string]string{
		"tp": strconv.Itoa(*inf.tp), "no-hash": strconv.FormatBool(*inf.noHash)}})
	if err != nil {
		return err
	}
	defer set.Close()
	fmt.Println()
	return writeFigures(ctx, os.Stdout, set.Root.Child("manifest"), dir)
}

// writeWith writes a file with write, replacing it only once complete.
func writeWith(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// printManifest prints the summary and problems of a manifest.
func printManifest(w io.Writer, m *inventory.Manifest, p inventory.ProgressSnapshot) {
	var bytes int64
	for _, t := range m.Tensors {
		bytes += t.NBytes
	}
	fmt.Fprintf(w, "%s: %d shards, %d tensors, %.2f GiB of tensor data\n", m.Root, len(m.Shards), m.NTensors, gib(bytes))
	switch {
	case !m.Hashed:
		fmt.Fprintln(w, "headers only (--no-hash): no digests, no value checks")
	default:
		fmt.Fprintf(w, "hashed %.2f GiB at %.0f MB/s; %d tensors read, %d from the cache; %.1f s\n",
			gib(p.HashedBytes), p.RateMBps, p.Tensors, p.CachedTensors, m.Seconds)
	}
	s := m.Summary
	fmt.Fprintln(w, "\nformat          tensors        GiB")
	for _, f := range slices.Sorted(maps.Keys(s.CountByFormat)) {
		fmt.Fprintf(w, "%-12s %10d %10.3f\n", f, s.CountByFormat[f], gib(s.BytesByFormat[f]))
	}
	if s.DecodedAllExactBF16 != nil {
		fmt.Fprintf(w, "\ndecoded quantised weights: all exact in bf16 %v, in fp16 %v", *s.DecodedAllExactBF16, *s.DecodedAllExactFP16)
		if s.DecodedAbsMax != nil && s.DecodedMinNonzeroAbs != nil {
			fmt.Fprintf(w, "; |x| from %g to %g", *s.DecodedMinNonzeroAbs, *s.DecodedAbsMax)
		}
		fmt.Fprintln(w)
		if n := len(s.DecodedNotExactFP16); n > 0 {
			fmt.Fprintf(w, "not exact in fp16 (first %d): %s\n", n, strings.Join(s.DecodedNotExactFP16, ", "))
		}
	}
	fmt.Fprintf(w, "router biases all F32: %v\n", s.RouterBiasF32)
	fmt.Fprintf(w, "\n%d problems\n", len(m.Problems))
	for _, pr := range m.Problems {
		fmt.Fprintf(w, "  %s\n", pr)
	}
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// watchInventory shows the bytes an inventory has hashed of those it set
// out to read.
func watchInventory(p *inventory.Progress) *progress {
	bar := newProgress("hashing", "")
	bar.watch(func() (int64, int64) {
		s := p.Snapshot()
		return s.HashedBytes, s.TotalBytes
	})
	return bar
}

func runDiff(args []string) error {
	fs := flags("diff")
	jsonOut := fs.String("json", "", "also write the comparison as JSON to this file")
	inf := addInventoryFlags(fs)
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	ctx, cancel := interruptible()
	defer cancel()
	var sides [2][]inventory.Record
	for i, p := range pos {
		if sides[i], err = recordsOf(ctx, p, inf); err != nil {
			return err
		}
	}
	c := inventory.Diff(sides[0], sides[1])
	c.A, c.B = pos[0], pos[1]
	if *jsonOut != "" {
		err := writeWith(*jsonOut, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", " ")
			return enc.Encode(c)
		})
		if err != nil {
			return err
		}
	}
	fmt.Print(c.Text())
	if differ(c) {
		return exitStatus(1)
	}
	return nil
}

// differ reports whether any tensor differs between the two sides: its
// bytes, its representation, its presence or its header. Tensors that
// could not be hashed (--no-hash) compare by name, dtype and shape alone.
func differ(c *inventory.Comparison) bool {
	for _, ch := range c.Changes {
		if (ch.Status != inventory.Same && ch.Status != inventory.Unhashed) || ch.Note != "" {
			return true
		}
	}
	return false
}

// recordsOf returns the records of a checkpoint directory (hashing it) or
// of a manifest file.
func recordsOf(ctx context.Context, path string, inf inventoryFlags) ([]inventory.Record, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		m, err := inventory.ReadManifest(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return m.Tensors, nil
	}
	inv, done, err := inf.open(path)
	if err != nil {
		return nil, err
	}
	defer done()
	for _, p := range inv.Catalog().Problems {
		fmt.Fprintf(os.Stderr, "%s: %s\n", path, p)
	}
	bar := watchInventory(inv.Progress())
	defer bar.finish()
	return inv.Records(ctx)
}

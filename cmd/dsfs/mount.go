package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/vfs"
	"github.com/dsfs/dsfs/views"
)

// source is an opened checkpoint with its views.
type source struct {
	cat      *checkpoint.Catalog
	set      *views.Set
	problems *problemReport
}

// openSource opens the checkpoint at dir, logs the problems found (one
// line per file and reason) and builds the views.
func openSource(dir string, opt views.Options) (*source, error) {
	// Opening a real checkpoint allocates about three times what it keeps
	// (header JSON, layouts); collecting more often while it runs keeps the
	// peak near what stays.
	defer debug.SetGCPercent(debug.SetGCPercent(35))
	cat, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	problems := newProblemReport(cat.Problems)
	problems.log()
	opt.Backend = traceBackend
	set, err := views.Build(cat, opt)
	if err != nil {
		cat.Close()
		return nil, err
	}
	return &source{cat: cat, set: set, problems: problems}, nil
}

func (s *source) Close() {
	s.set.Close()
	s.cat.Close()
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func runMount(args []string) error {
	fs := flags("mount")
	cacheMB := fs.Int("cache-mb", 1024, "memory budget of the block cache, MiB")
	viewList := fs.String("views", "", "comma-separated views to serve (default all):"+viewHelp())
	allowOther := fs.Bool("allow-other", false, "let other users read the mount")
	debugFuse := fs.Bool("debug", false, "log every FUSE request")
	qf := addQ2Flags(fs)
	tf := addTraceFlags(fs)
	vf := addViewFlags(fs)
	tp := fs.Int("tp", inventory.DefaultTP, "tensor-parallel degree whose cuts manifest/ reports (1: none)")
	noHash := fs.Bool("no-hash", false, "manifest/ reads headers only: no sha256, no value checks")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	opt := views.Options{Views: splitList(*viewList)}
	if err := qf.apply(&opt); err != nil {
		return err
	}
	tf.apply(&opt)
	vf.apply(&opt)
	opt.TP, opt.NoHash = *tp, *noHash
	if _, err := vfs.CheckMountPoint(pos[1]); err != nil {
		return err
	}
	// A signal during start-up is kept until the mount is up, then
	// unmounts it: the kernel never keeps a mount whose server died.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	budget := int64(*cacheMB) << 20
	cache := blockcache.New(budget, runtime.NumCPU())
	opt.Cache = cache
	src, err := openSource(pos[0], opt)
	if err != nil {
		cache.Close()
		return err
	}
	defer src.Close()
	defer cache.Close() // computations stop before the sources close
	// What the views cannot serve is logged before the mount appears, so
	// that a reader who sees the mount sees the whole log.
	for _, w := range src.set.Warnings() {
		slog.Warn(w)
	}
	// Freed blocks go back to the OS soon after eviction, so anonymous
	// memory tracks the catalog, the cache budget and what views compute
	// with, rather than the GC's high-water mark.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	debug.SetMemoryLimit(int64(ms.HeapAlloc) + budget + src.set.WorkingMemory() + 64<<20)
	m, err := vfs.Serve(pos[1], src.set.Root, vfile.CacheOpener(cache), vfs.Options{
		AllowOther:  *allowOther,
		Debug:       *debugFuse,
		SourceBytes: src.set.SourceBytes(),
		Status: func() map[string]any {
			st := map[string]any{
				"source":     src.cat.Dir,
				"views":      viewNamesOf(src.set.Root),
				"shards":     len(src.cat.Shards),
				"tensors":    len(src.cat.Tensors),
				"problems":   src.problems,
				"view_stats": src.set.Stats(),
				"cache":      cache.Stats(),
			}
			if opt.DiskCache != nil {
				st["disk_cache"] = opt.DiskCache.Stats()
			}
			return st
		},
	})
	if err != nil {
		return err
	}
	slog.Info("mounted", "source", src.cat.Dir, "mount", m.Dir, "shards", len(src.cat.Shards),
		"tensors", len(src.cat.Tensors), "problems", len(src.cat.Problems), "cache_mb", *cacheMB)
	go func() {
		s := <-sig
		slog.Info("unmounting", "signal", s.String())
		if err := m.Unmount(); err != nil {
			slog.Error("unmount failed", "mount", m.Dir, "err", err)
		}
	}()
	m.Wait()
	slog.Info("unmounted", "mount", m.Dir)
	return nil
}

// viewHelp lists the views, one line each, for --views.
func viewHelp() string {
	var b strings.Builder
	for _, v := range views.All() {
		fmt.Fprintf(&b, "\n  %-18s %s", v.Name, v.About)
	}
	return b.String()
}

func viewNamesOf(root *vfile.Node) []string {
	var names []string
	for _, c := range root.Children {
		names = append(names, c.Name)
	}
	return names
}

func runUmount(args []string) error {
	pos, err := parse(flags("umount"), args, 1, 1)
	if err != nil {
		return err
	}
	if err := vfs.Unmount(pos[0]); err != nil {
		return err
	}
	fmt.Println("unmounted", pos[0])
	return nil
}

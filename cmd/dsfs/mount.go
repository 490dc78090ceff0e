package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/hfcache"
	"github.com/dsfs/dsfs/internal/sdnotify"
	"github.com/dsfs/dsfs/objstore"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/vfs"
	"github.com/dsfs/dsfs/views"
)

// source is an opened checkpoint with its views.
type source struct {
	cat      *checkpoint.Catalog
	bucket   *objstore.Bucket // where cat's files are, if not on a local disk
	set      *views.Set
	problems *problemReport
}

// openSource opens the checkpoint at dir, logs the problems found (one
// line per file and reason) and builds the views.
//
// dir may be s3://BUCKET/PREFIX: the objects' chunks are then cached in
// opt.DiskCache's local directory (chunkDirIn), under its cap, or in the
// user's cache directory under objstore's default cap.
//
// A Hugging Face hub cache folder (models--ORG--NAME) stands for its
// snapshot of opt.Revision (a ref or commit, default main), and q2/ then
// records the snapshot's commit as the revision.
func openSource(dir string, opt views.Options) (*source, error) {
	if hfcache.IsRepo(dir) {
		snap, err := hfcache.Snapshot(dir, opt.Revision)
		if err != nil {
			return nil, err
		}
		slog.Info("Hugging Face cache folder: serving its snapshot", "folder", dir, "snapshot", filepath.Base(snap))
		dir, opt.Revision = snap, ""
	}
	// Opening a real checkpoint allocates about three times what it keeps
	// (header JSON, layouts, tokenizer.json); collecting more often while
	// it runs keeps the peak near what stays. At 40 the released
	// V4.1-Flash layout mounts with every view in about 1.37 s at 261 MB
	// on two cores; 60 takes 1.24 s and 285 MB, which left mount +
	// ls -lR above bench/run.sh's 300 MB (BASE=REV
	// bench/mount-release.sh compares two builds).
	defer debug.SetGCPercent(debug.SetGCPercent(40))
	var chunkDir string
	var chunkBytes int64
	if opt.DiskCache != nil && opt.DiskCache.Dir() != "" {
		chunkDir, chunkBytes = chunkDirIn(opt.DiskCache.Dir()), opt.DiskCache.Stats().Cap
		if chunkBytes == 0 { // --cache-dir-gb 0: no cap
			chunkBytes = math.MaxInt64
		}
	}
	cat, bucket, err := openCatalog(dir, chunkDir, chunkBytes)
	if err != nil {
		return nil, err
	}
	src := &source{cat: cat, bucket: bucket}
	src.problems = newProblemReport(cat.Problems)
	src.problems.log()
	opt.GPU = gpu
	if src.set, err = views.Build(cat, opt); err != nil {
		src.closeCatalog()
		return nil, err
	}
	return src, nil
}

func (s *source) Close() {
	s.set.Close()
	s.closeCatalog()
}

func (s *source) closeCatalog() {
	s.cat.Close()
	if s.bucket != nil {
		s.bucket.Close()
	}
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func runMount(args []string) (err error) {
	fs := flags("mount")
	cacheMB := fs.Int("cache-mb", 1024, "memory budget of the block cache, MiB")
	viewList := fs.String("views", "", "comma-separated views to serve (default all):"+viewHelp())
	allowOther := fs.Bool("allow-other", false, "let other users read the mount")
	debugFuse := fs.Bool("debug", false, "log every FUSE request")
	passthrough := fs.Bool("passthrough", true, "let the kernel read source files directly (FUSE passthrough: root, Linux 6.9+)")
	spliceReads := fs.Bool("splice", true, "hand source bytes to the kernel by splice rather than copying them")
	cacheFiles := fs.Bool("cache-files", false, "keep each view file read to its end whole in the --cache-dir directory, and let the kernel read it there on later opens, in this mount and the next (FUSE passthrough: root, Linux 6.9+); costs the file's size on disk, within --cache-dir-gb")
	background := fs.Bool("background", false, "return once the mount is ready, leaving a background process serving it, detached from the terminal and from this command's output")
	logFile := fs.String("log-file", "", "append the log to FILE instead of standard error (default with --background: the system log, journald or syslog through /dev/log, where there is one)")
	pidFile := fs.String("pid-file", "", "write the serving process's pid to FILE while it serves (removed when it exits)")
	nonEmpty := fs.Bool("nonempty", false, "mount over a directory that holds files, hiding them until unmounted (refused otherwise)")
	var o fuseOptions
	fs.Var(&o, "o", "mount options as FUSE tools take them, comma-separated: ro, allow_other, default_permissions, nonempty, nosuid, nodev, noexec, and dsfs's flags as name=value (cache_mb=2048, views=nvfp4:q2, log_file=FILE)")
	qf := addQ2Flags(fs)
	vf := addViewFlags(fs)
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	mountFlags, err := o.apply(fs)
	if err != nil {
		return err
	}
	detached := *background && os.Getenv(detachedEnv) != ""
	if *background && !detached {
		return mountInBackground()
	}
	logs, err := openLog(*logFile, detached)
	if err != nil {
		return err
	}
	defer logs.Close()
	defer func() {
		if err != nil {
			logs.failed(err)
		}
	}()
	// Signals are watched from the start: before the mount is up one ends
	// the process at once (nothing is mounted yet), after it one unmounts.
	stop := watchSignals()
	mp, err := vfs.ClaimMountPoint(pos[1], *nonEmpty, slog.Default())
	if err != nil {
		return err
	}
	defer mp.Release()
	// vfs.Serve checks the device too; checking here fails a machine
	// without FUSE before the catalog and the views are built, which
	// takes seconds on a released checkpoint.
	if err := vfs.CheckDevice(); err != nil {
		return fmt.Errorf("mounting %s: %w", mp.Dir, err)
	}
	removePID, err := writePIDFile(*pidFile)
	if err != nil {
		return err
	}
	defer removePID()
	stop.atExit(removePID)
	srcDir, err := sourceArg(pos[0])
	if err != nil {
		return err
	}
	opt := views.Options{Views: splitList(*viewList)}
	if err := qf.apply(&opt); err != nil {
		return err
	}
	defer qf.close() // after the views and caches that write to it, deferred below
	if *cacheFiles && (opt.DiskCache == nil || opt.DiskCache.Dir() == "" || !*passthrough) {
		return usagef("--cache-files needs a local cache directory (--cache-dir DIR, or --cache-dir-local DIR with a bucket) and passthrough")
	}
	vf.apply(&opt)
	budget := int64(*cacheMB) << 20
	cache := blockcache.New(budget, runtime.NumCPU())
	opt.Cache = cache
	// The memory limit grows by a view's working memory once the view
	// starts computing (trace/'s first forward): counted from the mount
	// on, it let the GC keep that much garbage of every other view's reads.
	var baseLimit atomic.Int64
	opt.Working = func(total int64) { debug.SetMemoryLimit(baseLimit.Load() + total) }
	src, err := openSource(srcDir, opt)
	if err != nil {
		cache.Close()
		return err
	}
	defer src.Close()
	defer cache.Close() // computations stop before the sources close
	var kept *views.KeptFiles
	if *cacheFiles {
		prog, err := program()
		if err != nil {
			return err
		}
		if kept, err = src.set.KeepFiles(prog, opt.DiskCache, cache, slog.Default()); err != nil {
			return err
		}
		defer kept.Close() // before the cache it reads through
	}
	// Freed blocks go back to the OS soon after eviction, so anonymous
	// memory tracks the catalog, the cache budget and what views compute
	// with (Options.Working above), rather than the GC's high-water mark. The heap in use counts
	// the build's garbage not yet collected too (at most 60% of what it
	// keeps, at the build's GC percent), so the limit errs high rather
	// than holding up the mount for a collection.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseLimit.Store(int64(ms.HeapAlloc) + budget + 64<<20)
	debug.SetMemoryLimit(baseLimit.Load() + src.set.WorkingMemory())
	// The build's garbage (a fifth of the heap for the released V4.1
	// layout) goes back before the mount serves: the first ls -lR, which
	// measures every view's header, otherwise grew the peak by 20 MB
	// beyond the build's, and ps showed the build's garbage as the mount's.
	debug.FreeOSMemory()
	blocks := blocksOf(src.set.Root)
	// The kernel keeps what its readers had, so their blocks' memory is
	// reused first; not where kept files read every block again once its
	// file was read whole.
	open := vfile.PageCacheOpener(cache)
	if kept != nil {
		open = vfile.CacheOpener(cache)
	}
	m, err := stop.serve(func() (*vfs.Mount, error) {
		return vfs.Serve(mp.Dir, src.set.Root, open, vfs.Options{
			AllowOther:    *allowOther,
			Debug:         *debugFuse,
			NoPassthrough: !*passthrough,
			NoSplice:      !*spliceReads,
			SourceBytes:   src.set.SourceBytes(),
			Source:        srcDir,
			Flags:         mountFlags,
			MountPoint:    mp,
			Kept:          keptFiles(kept),
			Status: func() map[string]any {
				st := map[string]any{
					"pid":         os.Getpid(),
					"log":         logs.Where,
					"source":      src.cat.Dir,
					"views":       viewNamesOf(src.set.Root),
					"shards":      len(src.cat.Shards),
					"tensors":     len(src.cat.Tensors),
					"problems":    src.problems,
					"view_stats":  src.set.Stats(),
					"view_blocks": progressOf(blocks, cache),
					"cache":       cache.Stats(),
				}
				if opt.DiskCache != nil {
					st["disk_cache"] = opt.DiskCache.Stats()
				}
				if kept != nil {
					st["kept_files"] = kept.Stats()
				}
				if src.bucket != nil {
					st["object_store"] = src.bucket.Stats()
				}
				if qf.cacheBucket != nil {
					st["cache_object_store"] = qf.cacheBucket.Stats()
				}
				return st
			},
		})
	})
	if err != nil {
		return err
	}
	// What the views cannot serve is logged once the mount is up, never
	// before a failure to mount, which it has nothing to do with; and
	// before readiness is told, so that whoever waits for it (systemd,
	// --background, dsfs demo) sees the whole log.
	for _, w := range src.set.Warnings() {
		slog.Warn(w)
	}
	slog.Info("mounted", "source", src.cat.Dir, "mount", m.Dir, "shards", len(src.cat.Shards),
		"tensors", len(src.cat.Tensors), "problems", len(src.cat.Problems), "cache_mb", *cacheMB)
	if detached {
		slog.Info("serving in the background; unmount with dsfs umount "+m.Dir, "pid", os.Getpid(), "log", logs.Where)
		if err := logs.detach(); err != nil {
			slog.Error("detaching from the starting command's standard error", "err", err)
		}
	}
	notifyReady()
	m.Wait()
	slog.Info("unmounted", "mount", m.Dir)
	return nil
}

// keptFiles is k as vfs takes it: no keeper is a nil interface, not a nil
// *views.KeptFiles in one.
func keptFiles(k *views.KeptFiles) vfs.KeptFiles {
	if k == nil {
		return nil
	}
	return k
}

// notifyReady tells a service manager (or a --background parent) that the
// mount is ready: vfs.Serve returns once the kernel has the mount and the
// server answers, so .dsfs/stats.json can be read. (dsfs does not read its
// own mount to check: a process blocked on its own FUSE request cannot be
// killed.)
func notifyReady() {
	if _, err := sdnotify.Notify(sdnotify.Ready); err != nil {
		slog.Error("telling the service manager the mount is ready", "err", err)
	}
}

// signalWatch ends a mount's life on SIGINT, SIGTERM or SIGHUP (a closed
// terminal): before the mount exists it ends the process, as nothing needs
// undoing; after, it stops every computation and unmounts lazily; a second
// signal exits at once.
type signalWatch struct {
	mu   sync.Mutex
	m    *vfs.Mount
	exit []func() // run before the process exits on a signal
}

// atExit has f run before the process exits on a signal (which skips
// deferred calls).
func (w *signalWatch) atExit(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.exit = append(w.exit, f)
}

// exitBySignal runs the atExit functions, then ends the process the way
// s would.
func (w *signalWatch) exitBySignal(s os.Signal) {
	w.mu.Lock()
	exit := w.exit
	w.mu.Unlock()
	for _, f := range exit {
		f()
	}
	exitBySignal(s)
}

// watchSignals starts watching. It also ignores SIGPIPE, so that a log
// pipe closed with the terminal cannot kill a serving process (which would
// leave a dead mount).
func watchSignals() *signalWatch {
	w := &signalWatch{}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	go w.run(sig)
	return w
}

// serve runs mount with signals held off, so a signal that arrives while
// the kernel sets the mount up finds it and unmounts it.
func (w *signalWatch) serve(mount func() (*vfs.Mount, error)) (*vfs.Mount, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, err := mount()
	w.m = m
	return m, err
}

func (w *signalWatch) run(sig chan os.Signal) {
	s := <-sig
	w.mu.Lock()
	m := w.m
	w.mu.Unlock()
	if m == nil {
		slog.Info("stopped during start-up; nothing was mounted", "signal", s.String())
		w.exitBySignal(s)
	}
	sdnotify.Notify(sdnotify.Stopping)
	slog.Info("unmounting (lazily: files still open keep reading what is on disk or computed, computations stop, and dsfs exits when the last file is closed)", "signal", s.String(), "mount", m.Dir)
	m.Cancel()
	if err := m.Detach(); err != nil {
		slog.Error("unmount failed; exiting, which leaves the mount dead (clear it with dsfs umount --lazy)", "mount", m.Dir, "err", err)
		w.exitBySignal(s)
	}
	s = <-sig
	slog.Warn("second signal: exiting now; reads of files still open on the detached mount fail", "signal", s.String(), "mount", m.Dir)
	w.exitBySignal(s)
}

// exitBySignal ends the process the way the signal s would by default, so
// that a parent (a shell, systemd) sees it stopped by s.
func exitBySignal(s os.Signal) {
	signal.Reset(s)
	if n, ok := s.(syscall.Signal); ok {
		syscall.Kill(os.Getpid(), n)
		time.Sleep(time.Second) // the signal is delivered asynchronously
		os.Exit(128 + int(n))
	}
	os.Exit(1)
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
	fs := flags("umount")
	lazy := fs.Bool("lazy", false, "detach now even while files are open; the mount process exits when the last is closed")
	fs.BoolVar(lazy, "z", false, "short for --lazy")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := vfs.Unmount(pos[0], *lazy); err != nil {
		return err
	}
	fmt.Println("unmounted", pos[0])
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/vfs"
	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// viewBlocks are the derived blocks of one view: the IDs of its distinct
// *vfile.Blocks segments and how many blocks they have in all.
type viewBlocks struct {
	ids    []string
	blocks int64
}

// blocksOf lists the derived blocks of each view under root, once at
// mount: each distinct ID counted once per view (views may share one, as
// nvfp4/ and nvfp4+engram-fp4/ share the experts' scale blocks).
func blocksOf(root *vfile.Node) map[string]viewBlocks {
	out := make(map[string]viewBlocks, len(root.Children))
	for _, v := range root.Children {
		seen := make(map[string]bool)
		var vb viewBlocks
		v.Walk(func(_ string, n *vfile.Node) error {
			if n.File == nil {
				return nil
			}
			for _, s := range n.File.Segments() {
				if b, ok := s.(*vfile.Blocks); ok && !seen[b.ID] {
					seen[b.ID] = true
					vb.ids = append(vb.ids, b.ID)
					vb.blocks += b.Count()
				}
			}
			return nil
		})
		out[v.Name] = vb
	}
	return out
}

// viewProgress is a view's entry in .dsfs/stats.json's view_blocks: its
// derived blocks, how many of them the mount made at least once (computed,
// or read from --cache-dir), and how many the memory cache holds now.
// Blocks less Computed are the blocks to go.
type viewProgress struct {
	Blocks   int64 `json:"blocks"`
	Computed int64 `json:"computed"`
	Cached   int64 `json:"cached"`
}

// progressOf is view_blocks: each view's viewProgress from the cache.
func progressOf(views map[string]viewBlocks, cache *blockcache.Cache) map[string]viewProgress {
	out := make(map[string]viewProgress, len(views))
	for name, vb := range views {
		p := cache.Progress(vb.ids)
		out[name] = viewProgress{Blocks: vb.blocks, Computed: p.Computed, Cached: p.Resident}
	}
	return out
}

// mountStatus is what dsfs status reads of .dsfs/stats.json.
type mountStatus struct {
	PID        int                     `json:"pid"`
	Source     string                  `json:"source"`
	Log        string                  `json:"log"`
	Uptime     float64                 `json:"uptime_seconds"`
	ViewBlocks map[string]viewProgress `json:"view_blocks"`
	Cache      blockcache.Stats        `json:"cache"`
}

func readStatus(mnt string) (*mountStatus, error) {
	path := filepath.Join(mnt, ".dsfs", "stats.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st mountStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.ViewBlocks == nil {
		return nil, fmt.Errorf("%s has no view_blocks: the mount is served by an older dsfs", path)
	}
	return &st, nil
}

func runStatus(args []string) error {
	fs := flags("status")
	interval := fs.Duration("interval", time.Second, "time between the two reads of stats.json the rates and ETAs come from")
	watch := fs.Bool("watch", false, "keep showing the progress every --interval until every view shown is computed, or Ctrl-C")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usagef("--interval %v: want a positive duration", *interval)
	}
	mnt, err := vfs.MountOf(pos[0])
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	prev, err := readStatus(mnt)
	if err != nil {
		return err
	}
	// MNT/VIEW[/...] shows that view only.
	abs, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	var only string
	if rel, _ := filepath.Rel(mnt, abs); rel != "." {
		only, _, _ = strings.Cut(rel, string(filepath.Separator))
		if _, ok := prev.ViewBlocks[only]; !ok {
			return fmt.Errorf("%s: %s is not a view of the mount at %s", pos[0], only, mnt)
		}
	}
	fmt.Printf("dsfs at %s: source %s, pid %d, up %v, log: %s\n", mnt, prev.Source, prev.PID,
		time.Duration(prev.Uptime*float64(time.Second)).Round(time.Second), prev.Log)
	fmt.Printf("memory cache: %s of %s in %d blocks\n", humanize.IBytes(uint64(prev.Cache.Bytes)), humanize.IBytes(uint64(prev.Cache.Budget)), prev.Cache.Blocks)
	redraw := *watch && term.IsTerminal(int(os.Stdout.Fd()))
	lines := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
		cur, err := readStatus(mnt)
		if err != nil {
			return err
		}
		if only != "" {
			cur.ViewBlocks = map[string]viewProgress{only: cur.ViewBlocks[only]}
		}
		if redraw && lines > 0 {
			fmt.Printf("\x1b[%dA", lines) // back to the first line of the last table
		}
		lines = printProgress(os.Stdout, prev, cur, redraw)
		if !*watch || allComputed(cur) {
			return nil
		}
		if !redraw {
			fmt.Println()
		}
		prev = cur
	}
}

// printProgress writes one line per view: a progress bar of its blocks
// computed, those cached and to go, and the rate and time left from prev
// to cur, each line cleared first when redraw. It returns the lines
// written.
func printProgress(w io.Writer, prev, cur *mountStatus, redraw bool) int {
	erase := ""
	if redraw {
		erase = "\x1b[2K"
	}
	names := slices.Sorted(maps.Keys(cur.ViewBlocks))
	width := 0
	for _, n := range names {
		width = max(width, len(n)+1)
	}
	dt := cur.Uptime - prev.Uptime
	for _, name := range names {
		p := cur.ViewBlocks[name]
		if p.Blocks == 0 {
			fmt.Fprintf(w, "%s%-*s nothing to compute (served from the source or generated whole)\n", erase, width, name+"/")
			continue
		}
		bar := progressbar.NewOptions64(p.Blocks, progressbar.OptionSetWriter(io.Discard),
			progressbar.OptionSetDescription(fmt.Sprintf("%-*s", width, name+"/")), progressbar.OptionSetWidth(24),
			progressbar.OptionSetTheme(progressbar.ThemeASCII), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false), progressbar.OptionSetElapsedTime(false), progressbar.OptionThrottle(0))
		bar.Set64(p.Computed)
		togo := p.Blocks - p.Computed
		line := fmt.Sprintf("%s computed, %d cached, %d to go", strings.TrimSpace(bar.String()), p.Cached, togo)
		rate := 0.0
		if before, ok := prev.ViewBlocks[name]; ok && dt > 0 {
			rate = float64(p.Computed-before.Computed) / dt
		}
		switch {
		case togo == 0:
			line += ", done"
		case rate > 0:
			eta := time.Duration(float64(togo) / rate * float64(time.Second))
			line += fmt.Sprintf(", %.1f blocks/s, ETA %v", rate, eta.Round(time.Second))
		default:
			line += ", idle (nothing reads it now)"
		}
		fmt.Fprintf(w, "%s%s\n", erase, line)
	}
	return len(names)
}

// allComputed reports whether every view's blocks were all computed.
func allComputed(st *mountStatus) bool {
	for _, p := range st.ViewBlocks {
		if p.Computed < p.Blocks {
			return false
		}
	}
	return true
}

func runWarm(args []string) error {
	fs := flags("warm")
	jobs := fs.Int("jobs", 4, "files read at once")
	pos, err := parse(fs, args, 1, math.MaxInt)
	if err != nil {
		return err
	}
	var files []string
	var total int64
	for _, p := range pos {
		if _, err := vfs.MountOf(p); err != nil {
			return err
		}
		err := filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == ".dsfs" {
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			files = append(files, path)
			total += fi.Size()
			return nil
		})
		if err != nil {
			return err
		}
	}
	ctx, stop := signalContext()
	defer stop()
	var read atomic.Int64
	bar := newProgress("warm", "")
	bar.watch(func() (int64, int64) { n := read.Load(); return n, max(total, n) })
	start := time.Now()
	r := warm(ctx, files, *jobs, &read)
	bar.finish()
	what := fmt.Sprintf("%d of %d files, %s", r.files, len(files), humanize.IBytes(uint64(read.Load())))
	if ctx.Err() != nil {
		// Reads still waiting end with this process, and the mount stops
		// computing what nobody else waits for.
		fmt.Fprintf(os.Stderr, "dsfs warm: interrupted after %s; what was computed stays in the mount's cache\n", what)
		return exitStatus(130)
	}
	for _, e := range r.errs {
		fmt.Fprintf(os.Stderr, "dsfs warm: %v\n", e)
	}
	fmt.Printf("warmed %s in %.1f s\n", what, time.Since(start).Seconds())
	if len(r.errs) > 0 {
		return exitStatus(1)
	}
	return nil
}

// warmResult is what warm read.
type warmResult struct {
	files int     // read to the end
	errs  []error // a file that could not be read, one each
}

// warm reads files to their ends, jobs at a time, in 1 MiB reads (the
// mount's request size; its read-ahead computes the next blocks
// meanwhile), adding the bytes it reads to read. It returns when every
// file is read or as soon as ctx ends, leaving reads in flight behind: a
// read waiting for a computation cannot be interrupted from here, and
// ends when the process exits.
func warm(ctx context.Context, files []string, jobs int, read *atomic.Int64) warmResult {
	next := make(chan string)
	results := make(chan error, len(files))
	for range max(jobs, 1) {
		go func() {
			buf := make([]byte, 1<<20)
			for f := range next {
				results <- readAll(ctx, f, buf, read)
			}
		}()
	}
	go func() {
		defer close(next)
		for _, f := range files {
			select {
			case next <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	var r warmResult
	for range files {
		select {
		case <-ctx.Done():
			return r
		case err := <-results:
			if err != nil {
				r.errs = append(r.errs, err)
			} else {
				r.files++
			}
		}
	}
	return r
}

// readAll reads the file at path to its end into buf, over and over,
// adding each read's count to read, until ctx ends.
func readAll(ctx context.Context, path string, buf []byte, read *atomic.Int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for ctx.Err() == nil {
		n, err := f.Read(buf)
		read.Add(int64(n))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

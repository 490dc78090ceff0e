package views

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// View is a named tree of virtual files built from a catalog.
type View struct {
	// Name is the view's directory, by which --views chooses it.
	Name string
	// About is one line for --help and the README.
	About string
	// Options are the view's own settings, declared once: the CLI offers
	// each as a flag of every command that builds views (mount, export),
	// and the builder reads it with Set.option.
	Options []Option
	// Transient says the builder holds much memory while it runs that
	// the view does not keep (trace/ parses the tokenizer): such views
	// are started first, while the heap holds little, so that what they
	// hold does not come on top of what the other views keep.
	Transient bool
	build     builder
}

// A builder makes one view from the set's catalog and options (s.Cat,
// s.Opt; s also shares the opened source files among the views). It
// returns all it makes; on error, what it started so far, in Closers.
type builder func(s *Set, name string) (Built, error)

// Built is what a view builder makes; the set keeps it.
type Built struct {
	// Root is the view's directory; Build names it after the view.
	Root *vfile.Node
	// Stats returns the view's live counters for .dsfs/stats.json, or is
	// nil for a view that keeps none.
	Stats func() any
	// Warnings are what the view cannot serve, one line each, for the
	// log once mounted.
	Warnings []string
	// Closers are what the view started (a compute backend, the views
	// manifest/ builds to describe them); the set closes them.
	Closers []io.Closer
}

// keep takes over what the builder of view name made.
func (s *Set) keep(name string, b Built) {
	if b.Stats != nil {
		s.stats[name] = b.Stats
	}
	s.warnings = append(s.warnings, b.Warnings...)
	s.closers = append(s.closers, b.Closers...)
}

// Set is the views of one catalog. It owns the source files it opened.
type Set struct {
	Cat  *checkpoint.Catalog // what the views are built from
	Root *vfile.Node         // a directory per view, named after it
	Opt  Options             // what the views are built with
	// registry is the views the set may build, in order; manifest/
	// describes the others from it. A field, not the package variable,
	// since the registry holds manifest/'s builder.
	registry []View
	// rewritten is each rewriter and what it made of the shards, made once
	// per mount: shared by the views that apply it, and by the sets
	// manifest/ builds to describe views not served.
	rewritten *rewrittenSet
	// top is the set whose tree manifest/ describes: the set itself, or
	// the one a view is being built for (forView).
	top *Set
	// records are the tensors of each virtual safetensors file as their
	// makers recorded them, which manifest/ describes; laidOut holds them
	// for the files the set laid out itself, without a copy.
	records map[*vfile.File][]tensorRecord
	laidOut map[*vfile.File]laidOut
	files   *openFiles
	// overview is the catalog's overview from its headers, made once for
	// manifest/'s summary, README and figure.
	overview func() *inventory.Overview
	stats    map[string]func() any // live counters of views that keep any
	// warnings are what views could not serve, for the log once mounted.
	warnings []string
	// shadowed lists, by source file name, the views whose own generated
	// file of that name is served in its place.
	shadowed map[string][]string
	closers  []io.Closer // backends the views started
	// working is memory the views that have started computing use
	// outside the block cache (trace/'s decoded matrices and hidden
	// states).
	working atomic.Int64
}

// newSet is an empty set of the views of registry, sharing the rewriters
// of shared (nil: its own) with the set that describes it.
func newSet(cat *checkpoint.Catalog, opt Options, registry []View, shared *rewrittenSet) *Set {
	if shared == nil {
		shared = &rewrittenSet{byName: make(map[string]*rewritten), errs: make(map[string]error)}
	}
	s := &Set{Cat: cat, Opt: opt, registry: registry, files: &openFiles{m: make(map[string]*sourcefile.File)},
		stats: make(map[string]func() any), shadowed: make(map[string][]string), rewritten: shared,
		records: make(map[*vfile.File][]tensorRecord), laidOut: make(map[*vfile.File]laidOut),
		overview: sync.OnceValue(func() *inventory.Overview { return inventory.NewOverview(cat) })}
	s.top = s
	return s
}

// forView is the set a builder of one view works on while others build
// theirs: s's catalog, options, open files and memos, with records and
// shadowed files of its own, which build merges back in registry order.
func (s *Set) forView() *Set {
	return &Set{Cat: s.Cat, Opt: s.Opt, registry: s.registry, rewritten: s.rewritten,
		top: s, files: s.files, overview: s.overview, shadowed: make(map[string][]string),
		records: make(map[*vfile.File][]tensorRecord), laidOut: make(map[*vfile.File]laidOut)}
}

// merge takes over what a view's builder recorded in v (forView).
func (s *Set) merge(v *Set) {
	maps.Copy(s.records, v.records)
	maps.Copy(s.laidOut, v.laidOut)
	for name, views := range v.shadowed {
		s.shadowed[name] = append(s.shadowed[name], views...)
	}
}

// WorkingMemory is what the views that have started computing outside the
// block cache (trace/'s forwards, nvfp4/'s calibration) may hold there
// from then on: 0 until something reads them.
func (s *Set) WorkingMemory() int64 { return s.working.Load() }

// startWorking counts n bytes more of working memory, held from now on,
// and tells Options.Working.
func (s *Set) startWorking(n int64) {
	if s.top != nil && s.top != s {
		s.top.startWorking(n) // a view's builder counts in the set it builds for
		return
	}
	total := s.working.Add(n)
	if s.Opt.Working != nil {
		s.Opt.Working(total)
	}
}

// Build builds the views of cat chosen by opt under one root directory.
func Build(cat *checkpoint.Catalog, opt Options) (*Set, error) {
	return build(cat, opt, registry)
}

// build builds the views of registry chosen by opt.
func build(cat *checkpoint.Catalog, opt Options, registry []View) (*Set, error) {
	names := opt.Views
	s := newSet(cat, opt, registry, nil)
	have := make([]string, len(registry))
	for i, v := range registry {
		have[i] = v.Name
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return nil, fmt.Errorf("unknown view %q (have %s)", n, strings.Join(have, ", "))
		}
	}
	var chosen []View
	for _, v := range s.registry {
		if len(names) == 0 || slices.Contains(names, v.Name) {
			chosen = append(chosen, v)
		}
	}
	// The views are independent: they are built concurrently and kept in
	// registry order, so the tree, stats, warnings and the error reported
	// are those of building them one after another. A view after one that
	// failed is not started (it would not have been built). Transient
	// views start first.
	built := make([]Built, len(chosen))
	errs := make([]error, len(chosen))
	sets := make([]*Set, len(chosen))
	var mu sync.Mutex
	failed := len(chosen) // the first view that failed so far
	var eg errgroup.Group
	eg.SetLimit(workers())
	start := make([]int, 0, len(chosen))
	for _, transient := range []bool{true, false} {
		for i, v := range chosen {
			if v.Transient == transient {
				start = append(start, i)
			}
		}
	}
	for _, i := range start {
		v := chosen[i]
		sets[i] = s.forView()
		eg.Go(func() error {
			mu.Lock()
			skip := i > failed
			mu.Unlock()
			if skip {
				return nil
			}
			if built[i], errs[i] = v.build(sets[i], v.Name); errs[i] != nil {
				mu.Lock()
				failed = min(failed, i)
				mu.Unlock()
			}
			return nil
		})
	}
	eg.Wait()
	var dirs []*vfile.Node
	var first error
	for i, v := range chosen {
		s.keep(v.Name, built[i])
		s.merge(sets[i])
		if errs[i] != nil && first == nil {
			first = fmt.Errorf("view %s: %w", v.Name, errs[i])
		}
		if first == nil {
			built[i].Root.Name = v.Name
			dirs = append(dirs, built[i].Root)
		}
	}
	if first != nil {
		s.Close()
		return nil, first
	}
	s.Root = vfile.Dir("", dirs...)
	s.setAttrs()
	for _, name := range slices.Sorted(maps.Keys(s.shadowed)) {
		s.warnings = append(s.warnings, fmt.Sprintf("%s: a source file named like a generated one is served in source/ only; %s/ serve their own",
			name, strings.Join(s.shadowed[name], "/, ")))
	}
	return s, nil
}

// Stats returns the live counters of the views that keep any (q2/: blocks
// quantised and served from the disk cache), by view name, for
// .dsfs/stats.json.
func (s *Set) Stats() map[string]any {
	m := make(map[string]any, len(s.stats))
	for name, f := range s.stats {
		m[name] = f()
	}
	return m
}

// Warnings lists, one line each, what the views found they cannot serve
// (trace/: an architecture it cannot run, a layer with a missing tensor),
// for the caller to log once the mount is up.
func (s *Set) Warnings() []string { return s.warnings }

// Close closes the source files the views opened.
func (s *Set) Close() error {
	var first error
	for _, c := range s.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.closers = nil
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	for _, f := range s.files.m {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.files.m = nil
	return first
}

// workers is how many goroutines a whole-checkpoint pass uses.
func workers() int { return runtime.GOMAXPROCS(0) }

// Package views turns a catalog into trees of virtual files (package
// vfile): one builder per view, run in registry order. A view never touches
// FUSE; the mount and `dsfs export` read what it builds through the same
// vfile.Reader.
package views

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/engramfp4"
	"github.com/dsfs/dsfs/nvfp4"
	"github.com/dsfs/dsfs/sourcefile"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/trace/model"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// View is a named tree of virtual files built from a catalog.
type View struct {
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

// Option is a setting a view declares.
type Option struct {
	Name    string // the flag's name, unique among all views' options
	Usage   string // names the view, as --help shows it among all flags
	Default string
	Kind    OptionKind
	// Check, when set, validates a given value, so that the CLI refuses a
	// bad one before it opens anything. Callers other than the CLI set
	// Options.Values directly, so a builder still checks what it relies on.
	Check func(string) error
	// File says the value names a file the view reads: what an export
	// holds then depends on the file's content, not on its name.
	File bool
}

// OptionKind is the type of an option's value, which the CLI's flag
// parses and --help shows.
type OptionKind int

const (
	StringOption OptionKind = iota // any text
	IntOption                      // a decimal integer
	BoolOption                     // "true" or "false"; the flag alone means true
)

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
	// Working is the memory the view may hold outside the block cache
	// while it computes, for the caller's memory limit.
	Working int64
}

// keep takes over what the builder of view name made.
func (s *Set) keep(name string, b Built) {
	if b.Stats != nil {
		s.stats[name] = b.Stats
	}
	s.warnings = append(s.warnings, b.Warnings...)
	s.closers = append(s.closers, b.Closers...)
	s.working += b.Working
}

// registry lists every view; a new view is one file plus one line here.
var registry = []View{
	{Name: "source", About: "the checkpoint as it is, served unchanged", build: buildSource},
	{Name: "nvfp4", About: "routed and MTP experts MXFP4 -> NVFP4 (lossless), everything else as is", build: safetensorsView(nvfp4Rewrites)},
	{Name: "engram-fp4", About: "Engram tables FP8 -> FP4 with block-32 E8M0 scales, everything else as is", build: safetensorsView(engramRewrites)},
	{Name: "nvfp4+engram-fp4", About: "both transcodes at once (the seed script's default output)", build: safetensorsView(nvfp4Rewrites, engramRewrites)},
	{Name: "trace", About: "DeepSeek MLA + MoE decoder-layer forwards on prompts, run when read: activations, routes, statistics", Options: traceOptions, Transient: true, build: buildTrace},
	{Name: "q2", About: "routed experts -> ggml IQ2_XXS (w1, w3) and Q2_K (w2), with plan, manifests and README", build: buildQ2},
	{Name: "gguf", About: "GGUF files for llama.cpp, LM Studio and ollama (deepseek2 BF16, Q8_0, IQ2_XXS; deepseek4 MXFP4, IQ2_XXS), single and split", Options: ggufOptions, build: buildGGUF},
	{Name: "manifest", About: "the inventory of every tensor: formats, bytes, sha256, value checks, where each view's tensors come from", Options: manifestOptions, build: buildManifest},
}

// Names lists the registered views in order.
func Names() []string {
	names := make([]string, len(registry))
	for i, v := range registry {
		names[i] = v.Name
	}
	return names
}

// All returns the registered views.
func All() []View { return append([]View(nil), registry...) }

// Options are what views are built with beyond the catalog: the caches
// and backends the caller owns, the settings every view shares and the
// values of the options views declare (View.Options).
type Options struct {
	// Views names the views to build; empty means all.
	Views []string
	// Revision is the source revision the q2/ documents record; empty
	// means the Hugging Face cache snapshot name when the source is one.
	// Not an option of q2/: the CLI's --revision also picks which
	// snapshot of a Hugging Face cache folder every view serves.
	Revision string
	// DiskCache, when set, keeps the blocks of expensive views (q2/) and
	// manifest/'s digests across mounts; the in-memory block cache stays
	// in front of it. The CLI opens it (--cache-dir), since verify, audit,
	// inspect and diff share it without building views.
	DiskCache *diskcache.Cache
	// Cache, when set, is the block cache files are read through; documents
	// that need a file's derived bytes (q2/'s shard manifests) read them
	// from it too, so a block read by both is computed once.
	Cache vfile.Cache
	// Backend starts the backend trace/ runs layers on for its --device
	// option (the CLI's, which knows CUDA); note is a line for the log.
	// Nil runs every device but cuda on the CPU.
	Backend func(device string) (b model.Backend, note string, err error)
	// V4Backend starts what DeepSeek-V4 layers run on for --device: nil
	// for the host engine. Nil runs them on the host.
	V4Backend func(device string) (b model.Backend, note string, err error)
	// Values are the views' declared options (View.Options) by name; an
	// option not given takes its default.
	Values map[string]string
}

// Set is the views of one catalog. It owns the source files it opened.
type Set struct {
	Cat  *checkpoint.Catalog
	Root *vfile.Node
	Opt  Options
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
	stats   map[string]func() any // live counters of views that keep any
	// warnings are what views could not serve, for the log once mounted.
	warnings []string
	// shadowed lists, by source file name, the views whose own generated
	// file of that name is served in its place.
	shadowed map[string][]string
	closers  []io.Closer // backends the views started
	// working is memory views use outside the block cache while they
	// compute (trace/'s decoded matrices and hidden states).
	working int64
}

// newSet is an empty set of the views of registry, sharing the rewriters
// of shared (nil: its own) with the set that describes it.
func newSet(cat *checkpoint.Catalog, opt Options, registry []View, shared *rewrittenSet) *Set {
	if shared == nil {
		shared = &rewrittenSet{byName: make(map[string]*rewritten)}
	}
	s := &Set{Cat: cat, Opt: opt, registry: registry, files: &openFiles{m: make(map[string]*sourcefile.File)},
		stats: make(map[string]func() any), shadowed: make(map[string][]string), rewritten: shared,
		records: make(map[*vfile.File][]tensorRecord), laidOut: make(map[*vfile.File]laidOut)}
	s.top = s
	return s
}

// forView is the set a builder of one view works on while others build
// theirs: s's catalog, options, open files and memos, with records and
// shadowed files of its own, which build merges back in registry order.
func (s *Set) forView() *Set {
	return &Set{Cat: s.Cat, Opt: s.Opt, registry: s.registry, rewritten: s.rewritten,
		top: s, files: s.files, shadowed: make(map[string][]string),
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

// openFiles are the source files the views of a set opened, each once.
type openFiles struct {
	mu sync.Mutex
	m  map[string]*sourcefile.File
}

// option returns the value of option name that view declares: the one
// given in Opt.Values, else its default.
func (s *Set) option(view, name string) string {
	if v, ok := s.Opt.Values[name]; ok {
		return v
	}
	for _, v := range s.registry {
		if v.Name != view {
			continue
		}
		for _, o := range v.Options {
			if o.Name == name {
				return o.Default
			}
		}
	}
	panic(fmt.Sprintf("views: view %s reads option %s, which it does not declare", view, name))
}

// intOption returns option name of view as an integer.
func (s *Set) intOption(view, name string) (int, error) {
	v := s.option(view, name)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %s: not an integer", name, v)
	}
	return n, nil
}

// boolOption returns option name of view as a boolean.
func (s *Set) boolOption(view, name string) (bool, error) {
	v := s.option(view, name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("--%s %s: not true or false", name, v)
	}
	return b, nil
}

// WorkingMemory is what the views may hold outside the block cache while
// they compute, for the caller's memory limit.
func (s *Set) WorkingMemory() int64 { return s.working }

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

// open returns the shared open handle of a source file, whose reads fail
// once the file changes.
func (s *Set) open(p string) (*sourcefile.File, error) {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	if f, ok := s.files.m[p]; ok {
		return f, nil
	}
	f, err := sourcefile.Open(p)
	if err != nil {
		return nil, err
	}
	if err := s.Cat.CheckOpened(p, f); err != nil {
		f.Close()
		return nil, err
	}
	s.files.m[p] = f
	return f, nil
}

// sourceFile is a file of the checkpoint served unchanged, as it was when
// the views opened it.
func (s *Set) sourceFile(name, p string) (*vfile.Node, error) {
	f, err := s.open(p)
	if err != nil {
		return nil, err
	}
	return sourceNode(name, f), nil
}

// sourceNode serves an opened source file unchanged.
func sourceNode(name string, f *sourcefile.File) *vfile.Node {
	file := vfile.NewFile(vfile.Range{R: f, Off: 0, N: f.Size()})
	file.Source, file.Origin = f.Path(), f
	return &vfile.Node{Name: name, File: file, From: []string{f.Path()}}
}

// tree places file nodes at their slash-separated paths under a directory.
func tree(name string, files map[string]*vfile.Node) *vfile.Node {
	root := vfile.Dir(name)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		dir := root
		parts := strings.Split(p, "/")
		for _, d := range parts[:len(parts)-1] {
			c := dir.Child(d)
			if c == nil {
				c = vfile.Dir(d)
				dir.Children = append(dir.Children, c)
				sort.Slice(dir.Children, func(i, j int) bool { return dir.Children[i].Name < dir.Children[j].Name })
			}
			dir = c
		}
		n := files[p]
		n.Name = parts[len(parts)-1]
		dir.Children = append(dir.Children, n)
		sort.Slice(dir.Children, func(i, j int) bool { return dir.Children[i].Name < dir.Children[j].Name })
	}
	return root
}

func buildSource(s *Set, _ string) (Built, error) {
	files := make(map[string]*vfile.Node)
	for _, sh := range s.Cat.Shards {
		files[sh.Name] = sourceNode(sh.Name, sh.File())
	}
	for _, f := range s.Cat.Files {
		n, err := s.sourceFile(f.Name, f.Path)
		if err != nil {
			return Built{}, err
		}
		files[f.Name] = n
	}
	// A bad shard is the user's file: source/ serves it as it is.
	for _, b := range s.Cat.BadShards {
		if b.Size < 0 {
			continue
		}
		n, err := s.sourceFile(b.Name, b.Path)
		if err != nil {
			return Built{}, err
		}
		files[b.Name] = n
	}
	return Built{Root: tree("source", files)}, nil
}

// tensorRecord is one tensor of a virtual safetensors file: what its maker
// recorded, and where the layout put its data.
type tensorRecord struct {
	tensorfile.Out
	Offset int64 // of the data in the file
}

// laidOut is the record of a virtual safetensors file the set laid out:
// the tensors as their makers made them, in data order from dataStart on.
// The outputs are shared with the makers (and with other views applying
// the same rewriter), so a record costs a pointer per tensor.
type laidOut struct {
	outs      []*tensorfile.Out
	dataStart int64
}

// records returns the record with each tensor's offset.
func (l laidOut) records() []tensorRecord {
	recs := make([]tensorRecord, len(l.outs))
	off := l.dataStart
	for i, o := range l.outs {
		recs[i] = tensorRecord{Out: *o, Offset: off}
		off += o.Data.Len()
	}
	return recs
}

// recordsOf returns the record of file f, nil when there is none.
func (s *Set) recordsOf(f *vfile.File) []tensorRecord {
	if l, ok := s.laidOut[f]; ok {
		return l.records()
	}
	return s.records[f]
}

// tensorFile lays out tensors as a safetensors file of view and keeps
// their record for manifest/.
func (s *Set) tensorFile(view string, outs []tensorfile.Out) (*vfile.File, error) {
	ptrs := make([]*tensorfile.Out, len(outs))
	for i := range outs {
		ptrs[i] = &outs[i]
	}
	return s.layOut(view, "", ptrs)
}

// layOut lays out the tensors outs points to as a safetensors file of view
// and keeps outs, sorted into data order, as its record. With an id the
// header is computed when read (tensorfile.Lay).
func (s *Set) layOut(view, id string, outs []*tensorfile.Out) (*vfile.File, error) {
	f, start, err := tensorfile.Lay(view, id, outs)
	if err != nil {
		return nil, err
	}
	s.laidOut[f] = laidOut{outs: outs, dataStart: start}
	return f, nil
}

// badShard keeps a bad source shard visible in a derived view: the index
// still places the shard's tensors (as the source index names them) in
// file, and file, when the source has one, fails every read naming the
// shard and the reason. A loader of the view then fails loudly instead of
// loading a checkpoint with the shard's tensors quietly left out.
func (s *Set) badShard(files map[string]*vfile.Node, weightMap map[string]string, file string, b checkpoint.BadShard) {
	for _, t := range b.Tensors {
		if _, ok := weightMap[t]; !ok {
			weightMap[t] = file
		}
	}
	badShardFile(files, file, b)
}

// badShardFile is the file part of badShard: the file, when the source
// has one, fails every read naming the shard and the reason.
func badShardFile(files map[string]*vfile.Node, file string, b checkpoint.BadShard) {
	if b.Size < 0 {
		return // missing: the loader's open fails, naming it
	}
	err := fmt.Errorf("source shard %s is bad (%s), so its tensors cannot be served; source/ has the file as it is", b.Name, b.Reason)
	files[file] = &vfile.Node{File: vfile.NewFile(vfile.Unreadable{N: b.Size, Err: err})}
}

// A Rewriter changes some tensors of a checkpoint. Rewrite returns the
// tensors that replace t (none to drop it) and true, or false to leave t to
// the next rewriter and finally to pass it through unchanged. A set makes
// each rewriter once, calls Rewrite once per tensor and shares what it
// returns among the views applying it, which must not modify it.
type Rewriter interface {
	Rewrite(t *checkpoint.Tensor) ([]tensorfile.Out, bool)
	// ConfigPatch lists the config.json keys the view sets.
	ConfigPatch() map[string]any
	// Files are the view's own files (reports, quantisation configs).
	Files() map[string]*vfile.Node
}

// rewrites names a way of making a Rewriter. Views applying rewrites of
// one name share what it makes of each tensor (rewrittenSet), so a name
// must stand for one rewriter.
type rewrites struct {
	name string
	make func(s *Set) (Rewriter, error)
}

var (
	nvfp4Rewrites  = rewrites{"nvfp4", func(s *Set) (Rewriter, error) { return nvfp4.New(s.Cat), nil }}
	engramRewrites = rewrites{"engram-fp4", func(s *Set) (Rewriter, error) { return engramfp4.New(s.Cat), nil }}
)

// nvfp4Transcoder returns the mount's NVFP4 transcoder, the one nvfp4/ and
// nvfp4+engram-fp4/ rewrite with, whose memo of each expert group's global
// exponent manifest/'s descriptions share.
func (s *Set) nvfp4Transcoder() (*nvfp4.Transcoder, error) {
	rw, err := s.rewritten.get(s, nvfp4Rewrites)
	if err != nil {
		return nil, err
	}
	return rw.rw.(*nvfp4.Transcoder), nil
}

// safetensorsView returns a view builder that rewrites the checkpoint's
// tensors with the given rewriters, shard by shard, and passes every other
// file through (config.json patched, the index rewritten).
func safetensorsView(makers ...rewrites) builder {
	return func(s *Set, name string) (Built, error) {
		var rws []*rewritten
		for _, m := range makers {
			rw, err := s.rewritten.get(s, m)
			if err != nil {
				return Built{}, err
			}
			rws = append(rws, rw)
		}
		root, err := s.rewrite(name, rws)
		return Built{Root: root}, err
	}
}

func (s *Set) rewrite(view string, rws []*rewritten) (*vfile.Node, error) {
	files := make(map[string]*vfile.Node)
	shardOuts := make([][]*tensorfile.Out, len(s.Cat.Shards))
	claims := make([][]claim, len(rws))
	entries := 0
	for i, sh := range s.Cat.Shards {
		for k, rw := range rws {
			claims[k] = rw.shard(i, sh)
		}
		shardOuts[i] = rewriteShard(sh, claims)
		entries += len(shardOuts[i])
	}
	for _, b := range s.Cat.BadShards {
		entries += len(b.Tensors)
	}
	// Bad shards first: a name the good shards place wins, as the index
	// keeps the last placement of a name.
	weightMap := make([]indexEntry, 0, entries)
	for _, b := range s.Cat.BadShards {
		for _, t := range b.Tensors {
			weightMap = append(weightMap, indexEntry{t, b.Name})
		}
		badShardFile(files, b.Name, b)
	}
	var total int64
	for i, sh := range s.Cat.Shards {
		outs := shardOuts[i]
		if len(outs) == 0 {
			continue
		}
		for _, o := range outs {
			weightMap = append(weightMap, indexEntry{o.Name, sh.Name})
			total += o.Data.Len()
		}
		f, err := s.layOut(view, view+"/"+sh.Name, outs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sh.Name, err)
		}
		files[sh.Name] = &vfile.Node{File: f, From: s.shardSources(sh)}
	}
	config := s.Cat.ConfigBytes
	for _, r := range rws {
		rw := r.rw
		for k, v := range rw.ConfigPatch() {
			b, err := checkpoint.PatchConfig(config, strings.Split(k, "."), v)
			if err != nil {
				return nil, fmt.Errorf("config.json: %w", err)
			}
			config = b
		}
		for name, n := range rw.Files() {
			if prev, ok := files[name]; ok {
				n = mergeReports(prev, n)
			}
			files[name] = n
		}
	}
	inference, err := patchInference(s.Cat, rws)
	if err != nil {
		return nil, err
	}
	for _, f := range s.Cat.Files {
		switch {
		case f.Name == "model.safetensors.index.json":
			continue
		case f.Name == "config.json" && !bytes.Equal(config, s.Cat.ConfigBytes):
			files[f.Name] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(config)), From: []string{f.Path}}
		case f.Name == checkpoint.InferenceConfigName && !bytes.Equal(inference, s.Cat.InferenceConfigBytes):
			files[f.Name] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(inference)), From: []string{f.Path}}
		case files[f.Name] != nil:
			s.shadowed[f.Name] = append(s.shadowed[f.Name], view)
		default:
			n, err := s.sourceFile(f.Name, f.Path)
			if err != nil {
				return nil, err
			}
			files[f.Name] = n
		}
	}
	if len(weightMap) > 0 {
		files["model.safetensors.index.json"] = &vfile.Node{File: indexOf(view+"/model.safetensors.index.json", total, weightMap)}
	}
	return tree("", files), nil
}

// rewriteShard returns the tensors of a shard in a view: each source
// tensor as the first rewriter claiming it made it (claims, one list per
// rewriter), else passed through.
func rewriteShard(sh *checkpoint.Shard, claims [][]claim) []*tensorfile.Out {
	n, passed := 0, 0
	for j := range sh.Tensors {
		if outs, ok := firstClaim(claims, j); ok {
			n += len(outs)
		} else {
			passed++
		}
	}
	pass := make([]tensorfile.Out, 0, passed)
	outs := make([]*tensorfile.Out, 0, n+passed)
	for j, t := range sh.Tensors {
		if c, ok := firstClaim(claims, j); ok {
			for k := range c {
				outs = append(outs, &c[k])
			}
			continue
		}
		pass = append(pass, tensorfile.Passthrough(t))
		outs = append(outs, &pass[len(pass)-1])
	}
	return outs
}

// firstClaim returns what the first rewriter claiming tensor j of a shard
// made of it, and whether one did.
func firstClaim(claims [][]claim, j int) ([]tensorfile.Out, bool) {
	for _, c := range claims {
		if c != nil && c[j].ok {
			return c[j].outs, true
		}
	}
	return nil, false
}

// mergeReports joins two rewriters' reports of the same name (both
// transcodes of nvfp4+engram-fp4 write TRANSCODE.json) into one JSON
// document holding each under its "view" field.
func mergeReports(a, b *vfile.Node) *vfile.Node {
	return jsonDoc(func(ctx context.Context) (any, error) {
		merged := make(map[string]json.RawMessage)
		for _, n := range []*vfile.Node{a, b} {
			raw, err := n.Doc.Bytes(ctx)
			if err != nil {
				return nil, err
			}
			var parts map[string]json.RawMessage
			if err := json.Unmarshal(raw, &parts); err != nil {
				return nil, err
			}
			if _, ok := parts["view"]; ok { // a single report: key it by its view
				var v string
				json.Unmarshal(parts["view"], &v)
				merged[v] = raw
				continue
			}
			for k, v := range parts { // already merged
				merged[k] = v
			}
		}
		return merged, nil
	})
}

// jsonDoc is a generated JSON document.
func jsonDoc(gen func(ctx context.Context) (any, error)) *vfile.Node {
	return &vfile.Node{Doc: vfile.NewDoc(jsonText(gen))}
}

// jsonText generates a document as indented JSON.
func jsonText(gen func(ctx context.Context) (any, error)) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		v, err := gen(ctx)
		if err != nil {
			return nil, err
		}
		return vfile.JSON(v)
	}
}

// An InferencePatcher is a Rewriter that also sets top-level string keys
// of DeepSeek's inference/config.json, which its reference code builds the
// model from, so that the two config files agree.
type InferencePatcher interface {
	InferencePatch() map[string]string
}

// patchInference returns inference/config.json as the rewriters patch it
// (only keys it already has, each value replaced in place: ModelArgs takes
// no unknown key).
func patchInference(cat *checkpoint.Catalog, rws []*rewritten) ([]byte, error) {
	b := cat.InferenceConfigBytes
	for _, rw := range rws {
		ip, ok := rw.rw.(InferencePatcher)
		if !ok || b == nil {
			continue
		}
		for k, v := range ip.InferencePatch() {
			if _, has := cat.Config.Inference[k]; !has {
				continue
			}
			p, err := checkpoint.PatchTopLevelString(b, k, v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", checkpoint.InferenceConfigName, err)
			}
			b = p
		}
	}
	return b, nil
}

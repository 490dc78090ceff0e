package views

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/nvfp4"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// manifestOptions are manifest/'s options. The CLI's check of --tp is the
// one inspect and diff share (the flag name's).
var manifestOptions = []Option{
	{Name: "tp", Usage: "tensor-parallel degree whose cuts manifest/ reports (1: none)", Default: strconv.Itoa(inventory.DefaultTP), Kind: IntOption},
	{Name: "no-hash", Usage: "manifest/ reads headers only: no sha256, no value checks", Default: "false", Kind: BoolOption},
}

// buildManifest is the manifest/ view: the inventory of every tensor.
// summary.json and README.md come from the headers; manifest.json and
// shards/NAME.json read the data they describe on first open (hashing and
// checking every byte once, with the results kept for the mount and, with
// a cache dir, across mounts; the set's stats show the progress);
// views/VIEW.json says where each tensor of the other views comes from,
// served beside it or not.
func buildManifest(s *Set, name string) (Built, error) {
	var opt inventory.Options
	var err error
	if opt.TP, err = s.intOption(name, "tp"); err != nil {
		return Built{}, err
	}
	if opt.NoHash, err = s.boolOption(name, "no-hash"); err != nil {
		return Built{}, err
	}
	if s.Opt.DiskCache != nil {
		c, err := inventory.OpenCache(ManifestCacheDir(s.Opt.DiskCache.Dir()))
		if err != nil {
			return Built{}, err
		}
		opt.Cache = c
	}
	inv := inventory.New(s.Cat, opt)
	files := map[string]*vfile.Node{
		"summary.json": {Doc: vfile.NewHeaderDoc(jsonText(func(context.Context) (any, error) { return inventory.NewOverview(s.Cat), nil }))},
		"README.md": {Doc: vfile.NewHeaderDoc(func(context.Context) ([]byte, error) {
			return inventory.NewOverview(s.Cat).Markdown(), nil
		})},
		"manifest.json": manifestDoc(inv, opt.NoHash),
	}
	for _, sh := range s.Cat.Shards {
		n := manifestDoc(inv, opt.NoHash, sh.Name)
		n.From = s.shardSources(sh)
		files["shards/"+sh.Name+".json"] = n
	}
	prov := &provenance{set: s.top, unserved: make(map[string]*Set)}
	for _, v := range s.described(name) {
		files["views/"+v+".json"] = &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) {
			d, err := prov.view(ctx, v)
			if err != nil {
				return nil, err
			}
			// Compact: a full checkpoint's view has ~100k tensors.
			b, err := json.Marshal(d)
			return append(b, '\n'), err
		})}
	}
	return Built{Root: tree("", files), Stats: func() any { return inv.Progress().Snapshot() },
		Closers: []io.Closer{prov}}, nil
}

// ManifestCacheDir is where manifest/ keeps its digests and checks inside
// a --cache-dir, beside the disk cache's entries (which live in two-digit
// hex directories only), so that `dsfs inspect --cache-dir` shares them.
func ManifestCacheDir(cacheDir string) string { return filepath.Join(cacheDir, "manifest") }

// manifestDoc is manifest.json, or a shard's document when shards are
// named. Without hashing (headersOnly) it follows from the headers, and is
// streamed: a full checkpoint's documents are tens of megabytes, which
// `ls -lR` should not leave behind. Every writing carries the time and
// duration of the first, so that all are the same bytes.
func manifestDoc(inv *inventory.Inventory, headersOnly bool, shards ...string) *vfile.Node {
	if !headersOnly {
		return &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) {
			m, err := inv.Manifest(ctx, shards...)
			if err != nil {
				return nil, err
			}
			return m.JSON()
		})}
	}
	var (
		mu      sync.Mutex
		stamped bool
		utc     string
		seconds float64
	)
	return &vfile.Node{Doc: vfile.NewStreamedDoc(func(ctx context.Context, w io.Writer) error {
		m, err := inv.Manifest(ctx, shards...)
		if err != nil {
			return err
		}
		mu.Lock()
		if !stamped {
			stamped, utc, seconds = true, m.GeneratedUTC, m.Seconds
		}
		m.GeneratedUTC, m.Seconds = utc, seconds
		mu.Unlock()
		return m.WriteJSON(w)
	})}
}

// described lists the views manifest/views/ describes, in registry order:
// every view that serves a checkpoint (nvfp4/, engram-fp4/,
// nvfp4+engram-fp4/, q2/), served beside manifest/ or not, so that `dsfs
// export manifest` holds them too, and trace/ when it is served (building
// it starts its compute backend). source/ needs no description.
func (s *Set) described(self string) []string {
	var out []string
	for _, v := range s.registry {
		switch {
		case v.Name == self || v.Name == "source":
		case v.Name == "trace" && len(s.Opt.Views) > 0 && !slices.Contains(s.Opt.Views, v.Name):
		default:
			out = append(out, v.Name)
		}
	}
	return out
}

// provenance describes where the files of the set's views come from.
type provenance struct {
	set *Set

	// unserved holds the views described but not served, each built in a
	// set of its own when its description is first read.
	mu       sync.Mutex
	unserved map[string]*Set
}

// viewDoc is views/VIEW.json.
type viewDoc struct {
	View  string    `json:"view"`
	Codec string    `json:"codec_version"`
	Files []fileDoc `json:"files"`
}

// fileDoc is one file of a view. Kind is "safetensors" (a virtual
// safetensors file, with its tensors), "source" (a checkpoint file served
// unchanged), "generated" (bytes made at mount: a patched config, an index),
// "document" (a report computed when first read) or "unreadable" (a bad
// source shard, whose reads fail).
type fileDoc struct {
	File    string      `json:"file"`
	Kind    string      `json:"kind"`
	Source  string      `json:"source,omitempty"`
	Bytes   *int64      `json:"bytes,omitempty"`
	Tensors []tensorDoc `json:"tensors,omitempty"`
}

// tensorDoc is one tensor of a virtual safetensors file and where its bytes
// come from. Codec is "copy" (source bytes unchanged, perhaps under another
// dtype), "literal" (bytes made at mount), "nvfp4_weight_scale",
// "nvfp4_weight_scale_2", "engram_fp4", or the name another view gives its
// blocks (q2), computed by codecs at CodecVersion.
type tensorDoc struct {
	Name         string      `json:"name"`
	DType        string      `json:"dtype"`
	Shape        []int64     `json:"shape"`
	Bytes        int64       `json:"bytes"`
	ByteRange    [2]int64    `json:"byte_range"` // in the virtual file
	Codec        string      `json:"codec"`
	CodecVersion string      `json:"codec_version,omitempty"`
	Sources      []sourceDoc `json:"sources"`
	// ScaleFacts, for an NVFP4 weight_scale only, are its group's global
	// exponent and its clamped and lossy blocks.
	*nvfp4.ScaleFacts

	expert *checkpoint.Tensor // the weight of an NVFP4 weight_scale, whose blocks are counted
}

// sourceDoc is a byte range of a source tensor an output is made from.
type sourceDoc struct {
	Tensor    string   `json:"tensor"`
	File      string   `json:"file"`
	ByteRange [2]int64 `json:"byte_range"` // absolute in File
}

func sourceOf(t *checkpoint.Tensor) sourceDoc {
	return sourceDoc{Tensor: t.Name, File: t.Shard.Name, ByteRange: [2]int64{t.Offset, t.Offset + t.Size}}
}

// view walks the tree of view name.
func (p *provenance) view(ctx context.Context, name string) (*viewDoc, error) {
	set, root := p.set, p.set.Root.Child(name)
	if root == nil {
		var err error
		if set, err = p.unservedView(name); err != nil {
			return nil, err
		}
		root = set.Root
	}
	doc := &viewDoc{View: name, Codec: tensorfile.CodecVersion, Files: []fileDoc{}}
	var pending []*tensorDoc // NVFP4 scales whose block counts read data
	err := root.Walk(func(path string, n *vfile.Node) error {
		switch {
		case n.IsDir():
			return nil
		case n.Doc != nil:
			doc.Files = append(doc.Files, fileDoc{File: path, Kind: "document"})
			return nil
		}
		size := n.File.Size()
		fd := fileDoc{File: path, Kind: "generated", Bytes: &size}
		switch {
		case n.File.Source != "":
			fd.Kind = "source"
			if rel, err := filepath.Rel(p.set.Cat.Dir, n.File.Source); err == nil {
				fd.Source = filepath.ToSlash(rel)
			}
		case isUnreadable(n.File):
			fd.Kind = "unreadable"
		case strings.HasSuffix(path, ".safetensors"):
			ts, err := tensors(set.recordsOf(n.File))
			if err != nil {
				return fmt.Errorf("%s/%s: %w", name, path, err)
			}
			fd.Kind, fd.Tensors = "safetensors", ts
		}
		doc.Files = append(doc.Files, fd)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range doc.Files {
		for j := range doc.Files[i].Tensors {
			if t := &doc.Files[i].Tensors[j]; t.Codec == nvfp4.WeightScaleCodec {
				pending = append(pending, t)
			}
		}
	}
	return doc, p.countBlocks(ctx, pending)
}

// isUnreadable reports whether f stands for a bad source shard.
func isUnreadable(f *vfile.File) bool {
	segs := f.Segments()
	if len(segs) == 0 {
		return false
	}
	_, ok := segs[0].(vfile.Unreadable)
	return ok
}

// unservedView builds a described view that the set does not serve, once.
// What it logs is logged by the served view already or concerns a view
// the user did not ask for, so its warnings are dropped.
func (p *provenance) unservedView(name string) (*Set, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.unserved[name]; ok {
		return u, nil
	}
	i := slices.IndexFunc(p.set.registry, func(v View) bool { return v.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("no view %s", name)
	}
	opt := p.set.Opt
	opt.Views = []string{name}
	u := newSet(p.set.Cat, opt, p.set.registry, p.set.rewritten)
	b, err := p.set.registry[i].build(u, name)
	u.keep(name, b)
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("view %s: %w", name, err)
	}
	u.Root = b.Root
	p.unserved[name] = u
	return u, nil
}

// Close closes the source files of the unserved views built.
func (p *provenance) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, u := range p.unserved {
		errs = append(errs, u.Close())
	}
	p.unserved = nil
	return errors.Join(errs...)
}

// tensors describes the tensors of a virtual safetensors file from what
// their makers recorded, in data order.
func tensors(recs []tensorRecord) ([]tensorDoc, error) {
	if recs == nil {
		return nil, fmt.Errorf("no record of its tensors")
	}
	out := make([]tensorDoc, len(recs))
	for i, r := range recs {
		n := r.Data.Len()
		td := tensorDoc{Name: r.Name, DType: string(r.DType), Shape: r.Shape, Bytes: n,
			ByteRange: [2]int64{r.Offset, r.Offset + n}, Codec: r.Codec, Sources: []sourceDoc{}}
		switch {
		case r.Codec == "":
			return nil, fmt.Errorf("tensor %s: its maker recorded no codec", r.Name)
		case n == 0:
			td.Codec = tensorfile.Literal
		case r.Codec == tensorfile.Literal:
		default:
			if r.Codec != tensorfile.Copy {
				td.CodecVersion = tensorfile.CodecVersion
			}
			for _, t := range r.Sources {
				td.Sources = append(td.Sources, sourceOf(t))
			}
			if r.Codec == nvfp4.WeightScaleCodec {
				td.expert = r.Sources[0].ScaleOf
			}
		}
		out[i] = td
	}
	return out, nil
}

// countBlocks sets the global exponent and block counts of NVFP4 scales.
func (p *provenance) countBlocks(ctx context.Context, tds []*tensorDoc) error {
	if len(tds) == 0 {
		return nil
	}
	nv, err := p.set.nvfp4Transcoder()
	if err != nil {
		return err
	}
	experts := make([]*checkpoint.Tensor, len(tds))
	for i, td := range tds {
		experts[i] = td.expert
	}
	facts, err := nv.Describe(ctx, experts)
	if err != nil {
		return err
	}
	for i, td := range tds {
		td.ScaleFacts = &facts[i]
	}
	return nil
}

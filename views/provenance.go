package views

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/nvfp4"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

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

// fileRecords are the records of one virtual safetensors file: laid out
// by the set, or kept whole by the view that planned the file (q2/).
type fileRecords struct {
	laid laidOut
	kept []tensorRecord
}

// len is how many tensors the file holds.
func (r fileRecords) len() int { return len(r.laid.outs) + len(r.kept) }

// all yields the records in data order. A laid-out file's are made as they
// are yielded, each with its offset: describing a view of every shard
// then copies no tensor's record.
func (r fileRecords) all() iter.Seq[tensorRecord] {
	return func(yield func(tensorRecord) bool) {
		off := r.laid.dataStart
		for _, o := range r.laid.outs {
			if !yield(tensorRecord{Out: *o, Offset: off}) {
				return
			}
			off += o.Data.Len()
		}
		for _, rec := range r.kept {
			if !yield(rec) {
				return
			}
		}
	}
}

// recordsOf returns the records of file f, and false when there are none.
func (s *Set) recordsOf(f *vfile.File) (fileRecords, bool) {
	if l, ok := s.laidOut[f]; ok {
		return fileRecords{laid: l}, true
	}
	recs, ok := s.records[f]
	return fileRecords{kept: recs}, ok
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

// provenance describes where the files of the set's views come from.
type provenance struct {
	set *Set

	// unserved holds the views described but not served, each built in a
	// set of its own when its description is first read.
	mu       sync.Mutex
	unserved map[string]*Set
}

// viewDescription is manifest/views/VIEW.json: where each file and tensor
// of a view comes from.
type viewDescription struct {
	View  string            `json:"view"`
	Codec string            `json:"codec_version"`
	Files []fileDescription `json:"files"`
}

// fileDescription is one file of a view. Kind is "safetensors" (a virtual
// safetensors file, with its tensors), "source" (a checkpoint file served
// unchanged), "generated" (bytes made at mount: a patched config, an index),
// "document" (a file generated whole when first read, a vfile.Doc) or
// "unreadable" (a bad source shard, whose reads fail).
type fileDescription struct {
	File    string              `json:"file"`
	Kind    string              `json:"kind"`
	Source  string              `json:"source,omitempty"`
	Bytes   *int64              `json:"bytes,omitempty"`
	Tensors []tensorDescription `json:"tensors,omitempty"`
}

// tensorDescription is one tensor of a virtual safetensors file and where
// its bytes come from. Codec is "copy" (source bytes unchanged, perhaps
// under another dtype), "literal" (bytes made at mount),
// "nvfp4_weight_scale", "nvfp4_weight_scale_2", "engram_fp4", or the name
// another view gives its blocks (q2), computed by codecs at CodecVersion.
type tensorDescription struct {
	Name         string              `json:"name"`
	DType        string              `json:"dtype"`
	Shape        []int64             `json:"shape"`
	Bytes        int64               `json:"bytes"`
	ByteRange    [2]int64            `json:"byte_range"` // in the virtual file
	Codec        string              `json:"codec"`
	CodecVersion string              `json:"codec_version,omitempty"`
	Sources      []sourceDescription `json:"sources"`
	// ScaleFacts, for an NVFP4 weight_scale only, are its group's global
	// exponent and its clamped and lossy blocks.
	*nvfp4.ScaleFacts

	expert *checkpoint.Tensor // the weight of an NVFP4 weight_scale, whose blocks are counted
}

// sourceDescription is a byte range of a source tensor an output is made
// from.
type sourceDescription struct {
	Tensor    string   `json:"tensor"`
	File      string   `json:"file"`
	ByteRange [2]int64 `json:"byte_range"` // absolute in File
}

func sourceOf(t *checkpoint.Tensor) sourceDescription {
	return sourceDescription{Tensor: t.Name, File: t.Shard.Name, ByteRange: [2]int64{t.Offset, t.Offset + t.Size}}
}

// tree returns the tree of view name and the set that built it: the
// described set's, or one built for it when the set does not serve it.
func (p *provenance) tree(name string) (*Set, *vfile.Node, error) {
	if root := p.set.Root.Child(name); root != nil {
		return p.set, root, nil
	}
	set, err := p.unservedView(name)
	if err != nil {
		return nil, nil, err
	}
	return set, set.Root, nil
}

// view walks the tree of view name.
func (p *provenance) view(ctx context.Context, name string) (*viewDescription, error) {
	set, root, err := p.tree(name)
	if err != nil {
		return nil, err
	}
	d := &viewDescription{View: name, Codec: tensorfile.CodecVersion, Files: []fileDescription{}}
	var pending []*tensorDescription // NVFP4 scales whose block counts read data
	err = root.Walk(func(path string, n *vfile.Node) error {
		switch {
		case n.IsDir():
			return nil
		case n.Doc != nil:
			d.Files = append(d.Files, fileDescription{File: path, Kind: "document"})
			return nil
		}
		size := n.File.Size()
		fd := fileDescription{File: path, Kind: "generated", Bytes: &size}
		switch {
		case n.File.Source != "":
			fd.Kind = "source"
			if rel, err := filepath.Rel(p.set.Cat.Dir, n.File.Source); err == nil {
				fd.Source = filepath.ToSlash(rel)
			}
		case isUnreadable(n.File):
			fd.Kind = "unreadable"
		case strings.HasSuffix(path, ".safetensors"):
			recs, ok := set.recordsOf(n.File)
			if !ok {
				return fmt.Errorf("%s/%s: no record of its tensors", name, path)
			}
			ts, err := tensors(recs)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", name, path, err)
			}
			fd.Kind, fd.Tensors = "safetensors", ts
		}
		d.Files = append(d.Files, fd)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range d.Files {
		for j := range d.Files[i].Tensors {
			if t := &d.Files[i].Tensors[j]; t.Codec == nvfp4.WeightScaleCodec {
				pending = append(pending, t)
			}
		}
	}
	return d, p.countBlocks(ctx, pending)
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
func tensors(recs fileRecords) ([]tensorDescription, error) {
	out := make([]tensorDescription, 0, recs.len())
	for r := range recs.all() {
		n := r.Data.Len()
		td := tensorDescription{Name: r.Name, DType: string(r.DType), Shape: r.Shape, Bytes: n,
			ByteRange: [2]int64{r.Offset, r.Offset + n}, Codec: r.Codec, Sources: []sourceDescription{}}
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
		out = append(out, td)
	}
	return out, nil
}

// countBlocks sets the global exponent and block counts of NVFP4 scales.
func (p *provenance) countBlocks(ctx context.Context, tds []*tensorDescription) error {
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

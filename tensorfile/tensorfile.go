// Package tensorfile lays out virtual safetensors files: tensors whose data
// are vfile segments, in the reference serializer's order (FORMATS.md
// "Virtual safetensors files"), and derived tensors cut into blocks of
// whole rows.
package tensorfile

import (
	"context"
	"fmt"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/vfile"
)

// Out is one tensor of a virtual safetensors file, with where it comes
// from as its maker records it when it creates it.
type Out struct {
	Name  string
	DType safetensors.DType
	Shape []int64
	Data  vfile.Segment
	// Codec says how Data is made: Copy, Literal, or the name of the
	// transform computing it (nvfp4_weight_scale, engram_fp4, q2, ...).
	Codec string
	// Sources are the source tensors Data is made from, in the order the
	// documents list them.
	Sources []*checkpoint.Tensor
	// Tail lays the tensor out after all the others (FORMATS.md: nvfp4/'s
	// weight_scale_2), so that reading the header and the first tensors
	// never computes it; in the reference order instead when the others do
	// not end on a multiple of 8 bytes.
	Tail bool
}

// CodecVersion is the version of the codecs that compute derived tensors
// (codecs.Version), which every file's header names (dsfs.codec) and the
// documents describing the files repeat.
const CodecVersion = codecs.Version

// Codecs of tensors that no transform computes.
const (
	Copy    = "copy"    // source bytes unchanged, perhaps under another dtype
	Literal = "literal" // bytes made when the view is built
)

// Passthrough serves a source tensor unchanged.
func Passthrough(t *checkpoint.Tensor) Out {
	return Out{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: vfile.Range{R: t.Shard, Off: t.Offset, N: t.Size},
		Codec: Copy, Sources: []*checkpoint.Tensor{t}}
}

// Layout is File that also returns the layout, for callers that record
// where each tensor landed.
func Layout(view string, outs []Out) (*vfile.File, *safetensors.Layout, error) {
	ptrs := make([]*Out, len(outs))
	for i := range outs {
		ptrs[i] = &outs[i]
	}
	return lay(view, "", ptrs)
}

// Lay lays out the tensors outs points to as a safetensors file of view,
// as Layout does, and sorts outs into data order in place: tensor i's data
// starts at dataStart plus the lengths of those before it. A caller that
// keeps outs as its record of the file needs no copy of them.
//
// With an id, the header is computed from outs when it is read, as a
// Small segment of that ID, instead of kept: it is ~100 bytes per tensor, and a
// view of a released checkpoint has ~140k tensors. Computing it reads no
// source byte.
func Lay(view, id string, outs []*Out) (f *vfile.File, dataStart int64, err error) {
	f, l, err := lay(view, id, outs)
	if err != nil {
		return nil, 0, err
	}
	return f, l.DataStart(), nil
}

// lay lays out outs and sorts them into data order; see Lay for id.
func lay(view, id string, outs []*Out) (*vfile.File, *safetensors.Layout, error) {
	// Specs in the order given, the tail ones last; byPos maps them back.
	specs := make([]safetensors.Spec, 0, len(outs))
	byPos := make([]*Out, 0, len(outs))
	var headBytes int64
	for _, o := range outs {
		if !o.Tail {
			specs = append(specs, safetensors.Spec{Name: o.Name, DType: o.DType, Shape: o.Shape})
			byPos = append(byPos, o)
			headBytes += o.Data.Len()
		}
	}
	head := len(specs)
	for _, o := range outs {
		if o.Tail {
			specs = append(specs, safetensors.Spec{Name: o.Name, DType: o.DType, Shape: o.Shape})
			byPos = append(byPos, o)
		}
	}
	if headBytes%8 != 0 {
		head = len(specs)
	}
	var l *safetensors.Layout
	var err error
	if id != "" {
		l, err = safetensors.PlanLayoutTail(metadata(view), specs, head)
	} else {
		l, err = safetensors.NewLayoutTail(metadata(view), specs[:head], specs[head:])
	}
	if err != nil {
		return nil, nil, err
	}
	segs := make([]vfile.Segment, 1, len(outs)+1)
	segs[0] = vfile.Bytes(l.Header)
	if id != "" {
		segs[0] = header(id, view, outs, l.DataStart())
	}
	for i, k := range l.Order {
		o := byPos[k]
		if n, _ := safetensors.ByteLen(o.DType, o.Shape); o.Data.Len() != n { // laid out: no error
			return nil, nil, fmt.Errorf("tensor %s: data is %d bytes, %s %v needs %d", o.Name, o.Data.Len(), o.DType, o.Shape, n)
		}
		outs[i] = o
		segs = append(segs, o.Data)
	}
	return vfile.NewFile(segs...), l, nil
}

// metadata is the __metadata__ of a virtual safetensors file of view.
func metadata(view string) []safetensors.Meta {
	return []safetensors.Meta{{Key: "format", Value: "pt"}, {Key: "dsfs.view", Value: view}, {Key: "dsfs.codec", Value: CodecVersion}}
}

// header is the n-byte header of a file of view laid out by lay, computed
// on every read from outs, which lay sorted into data order: written in
// that order it is the header lay measured, with no sorting or checking
// again. It is a Small segment, not Blocks: writing it reads no source
// byte and costs less than a trip through the block cache, where it would
// wait behind derived blocks being read ahead, and the kernel keeps what
// it read of it.
func header(id, view string, outs []*Out, n int64) vfile.Small {
	return vfile.Small{ID: id, N: n, Compute: func(_ context.Context, dst []byte) error {
		specs := make([]safetensors.Spec, len(outs))
		for i, o := range outs {
			specs[i] = safetensors.Spec{Name: o.Name, DType: o.DType, Shape: o.Shape}
		}
		h, err := safetensors.AppendHeader(dst[:0], metadata(view), specs)
		if err != nil {
			return err
		}
		if int64(len(h)) != n {
			return fmt.Errorf("%s: header of %d bytes, laid out as %d", id, len(h), n)
		}
		return nil
	}}
}

// blockTarget is the size a derived block aims for: large enough that the
// per-block overhead vanishes, small enough to cache well.
const blockTarget = 1 << 20

// RowBlocks returns derived data of rows rows of rowBytes bytes each, cut
// into blocks of whole rows of about blockTarget bytes; compute fills rows
// [lo, hi). id is the block-cache ID: it names the transform and the
// tensor, so views sharing a transform share blocks.
func RowBlocks(id string, rows, rowBytes int64, compute func(ctx context.Context, lo, hi int64, dst []byte) error) *vfile.Blocks {
	per := max(1, blockTarget/rowBytes)
	return &vfile.Blocks{ID: id, N: rows * rowBytes, BlockLen: per * rowBytes,
		Compute: func(ctx context.Context, i int64, dst []byte) error {
			lo := i * per
			return compute(ctx, lo, lo+int64(len(dst))/rowBytes, dst)
		}}
}

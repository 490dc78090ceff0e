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
	specs := make([]safetensors.Spec, 0, len(outs))
	var tail []safetensors.Spec
	var headBytes int64
	byName := make(map[string]vfile.Segment, len(outs))
	for _, o := range outs {
		s := safetensors.Spec{Name: o.Name, DType: o.DType, Shape: o.Shape}
		if o.Tail {
			tail = append(tail, s)
		} else {
			specs = append(specs, s)
			headBytes += o.Data.Len()
		}
		byName[o.Name] = o.Data
	}
	if headBytes%8 != 0 {
		specs, tail = append(specs, tail...), nil
	}
	l, err := safetensors.NewLayoutTail([]safetensors.Meta{
		{Key: "format", Value: "pt"}, {Key: "dsfs.view", Value: view}, {Key: "dsfs.codec", Value: codecs.Version},
	}, specs, tail)
	if err != nil {
		return nil, nil, err
	}
	f := vfile.NewFile(vfile.Bytes(l.Header))
	for _, t := range l.Tensors {
		seg := byName[t.Name]
		if seg.Len() != t.Len() {
			return nil, nil, fmt.Errorf("tensor %s: data is %d bytes, %s %v needs %d", t.Name, seg.Len(), t.DType, t.Shape, t.Len())
		}
		f.Append(seg)
	}
	return f, l, nil
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

package views

import (
	"context"
	"fmt"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/figures"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/vfile"
)

// bytesPNG is manifest/bytes.png: how the tensor bytes of the source and
// of each of views (as manifest/views/ describes them) divide by role and
// by dtype. A tensor a view makes has the role of the first source tensor
// it is made from; trace/ serves activations, not a checkpoint, and is
// left out; gguf/ is a bar per recipe that applies.
func (p *provenance) bytesPNG(ctx context.Context, views []string) ([]byte, error) {
	fig, err := p.bytesFigure(ctx, views)
	if err != nil {
		return nil, err
	}
	return fig.PNG()
}

// bytesFigure is what bytesPNG draws.
func (p *provenance) bytesFigure(ctx context.Context, views []string) (figures.Bytes, error) {
	o := p.set.overview()
	src := newByteBar("source")
	for k, t := range o.ByRole {
		src.ByRole[k] = t.Bytes
	}
	for k, t := range o.ByDType {
		src.ByDType[k] = t.Bytes
	}
	fig := figures.Bytes{Title: "tensor bytes", Bars: []figures.ByteBar{src}}
	for _, v := range views {
		if err := ctx.Err(); err != nil {
			return fig, err
		}
		switch v {
		case "trace":
		case "gguf":
			fig.Bars = append(fig.Bars, ggufBars(p.set.Cat)...)
		default:
			bar, err := p.byteBar(v)
			if err != nil {
				return fig, fmt.Errorf("bytes.png: view %s: %w", v, err)
			}
			fig.Bars = append(fig.Bars, bar)
		}
	}
	return fig, nil
}

func newByteBar(name string) figures.ByteBar {
	return figures.ByteBar{Name: name, ByRole: make(map[string]int64), ByDType: make(map[string]int64)}
}

// add counts n bytes of a tensor of dtype made from sources.
func add(bar figures.ByteBar, dtype string, n int64, sources []*checkpoint.Tensor) {
	role := string(checkpoint.RoleOther) // made from nothing: a literal
	if len(sources) > 0 && sources[0] != nil {
		role = string(sources[0].Role)
	}
	bar.ByRole[role] += n
	bar.ByDType[dtype] += n
}

// byteBar is the tensor bytes of view name's safetensors files, from the
// records their makers keep.
func (p *provenance) byteBar(name string) (figures.ByteBar, error) {
	bar := newByteBar(name)
	set, root, err := p.tree(name)
	if err != nil {
		return bar, err
	}
	err = root.Walk(func(path string, n *vfile.Node) error {
		if n.File == nil || !strings.HasSuffix(path, ".safetensors") || n.File.Source != "" || isUnreadable(n.File) {
			return nil
		}
		recs, ok := set.recordsOf(n.File)
		if !ok {
			return fmt.Errorf("%s: no record of its tensors", path)
		}
		for r := range recs.all() {
			add(bar, string(r.DType), r.Data.Len(), r.Sources)
		}
		return nil
	})
	return bar, err
}

// ggufBars are the tensor bytes of each gguf/ recipe that applies to cat,
// from the plan its directory is laid out from.
func ggufBars(cat *checkpoint.Catalog) []figures.ByteBar {
	var bars []figures.ByteBar
	for _, r := range gguf.Recipes() {
		m, err := r.Plan(cat)
		if err != nil {
			continue // gguf/README.md says why
		}
		bar := newByteBar("gguf/" + r.Name)
		for _, t := range m.Tensors {
			var src *checkpoint.Tensor
			if len(t.Parts) > 0 {
				src = t.Parts[0].Src
			}
			add(bar, t.Type.Name, t.Bytes(), []*checkpoint.Tensor{src})
		}
		bars = append(bars, bar)
	}
	return bars
}

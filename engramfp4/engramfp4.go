// Package engramfp4 is the engine of the engram-fp4/ view: it transcodes
// a checkpoint's Engram tables from FP8 to FP4 and reports how close the
// result stays (FORMATS.md "engram-fp4/").
//
// # The transcode
//
// An Engram table is E4M3 rows with one E8M0 scale per 32 values (its
// paired 1x32 ".scale"). Each 32-block is decoded exactly, given the
// smallest power-of-two scale under which its largest value fits E2M1,
// and rounded to E2M1 codes, ties to the even code: the table becomes I8
// rows of packed codes, half the width, and its scale an E8M0 tensor of
// the same shape as before. Every block is computed from its own source
// block alone, so any run of rows is computed on its own.
//
// # What a view gets
//
// Rewrite replaces a table and its scale by the two transcoded tensors,
// each computed in blocks of whole rows (tensorfile.RowBlocks) when read;
// ConfigPatch says quantization_config.engram_dtype is "fp4"; Files is
// TRANSCODE.json, which transcodes every table once more to measure, per
// table, the mean cosine between the FP8 rows and their FP4 decode.
// Package views lays it out.
package engramfp4

import (
	"context"
	"fmt"
	"math"
	"path"
	"runtime"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/internal/scratch"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// Transcoder transcodes the Engram tables of one catalog to FP4. It is
// safe for concurrent use.
type Transcoder struct {
	config *checkpoint.Config
	tables []*checkpoint.Tensor // the tables it transcodes, in catalog order
}

// New returns the transcoder of cat's Engram tables. It reads headers only.
func New(cat *checkpoint.Catalog) *Transcoder {
	e := &Transcoder{config: cat.Config}
	for _, t := range cat.Tensors {
		if isTable(t) {
			e.tables = append(e.tables, t)
		}
	}
	return e
}

// isTable reports whether t is an Engram table the transcoder converts:
// E4M3 rows with a paired 1x32 E8M0 scale.
func isTable(t *checkpoint.Tensor) bool {
	return t.Role == checkpoint.RoleEngram && t.DType == safetensors.F8E4M3 && len(t.Shape) == 2 &&
		t.Shape[1]%codecs.MXBlock == 0 && t.Scale != nil && t.Scale.DType == safetensors.F8E8M0 &&
		t.Block == [2]int64{1, codecs.MXBlock}
}

// chunkRows is how many rows the scale blocks and the report read at a
// time.
const chunkRows = 8192

// viewRows calls fn with rows [lo, hi) of table t and of its scale, as
// the page cache holds them (checkpoint.Tensor.View): the scale tensor
// reads every row of the table, and the codes read them again, so a copy
// of each would cost two.
func viewRows(t *checkpoint.Tensor, lo, hi int64, fn func(src, sc []byte) error) error {
	cols, nb := t.Shape[1], t.Shape[1]/codecs.MXBlock
	return t.View(lo*cols, (hi-lo)*cols, func(src []byte) error {
		return t.Scale.View(lo*nb, (hi-lo)*nb, func(sc []byte) error { return fn(src, sc) })
	})
}

// Rewrite returns the FP4 tensors of a table and true, nothing and true
// for its scale (emitted with its table), and false for any other tensor.
func (e *Transcoder) Rewrite(t *checkpoint.Tensor) ([]tensorfile.Out, bool) {
	if t.ScaleOf != nil && isTable(t.ScaleOf) {
		return nil, true
	}
	if !isTable(t) {
		return nil, false
	}
	rows, cols := t.Shape[0], t.Shape[1]
	nb := cols / codecs.MXBlock
	b := base(t.Name)
	// The scale block of many rows is computed a chunk of source rows at
	// a time, so that a source that is read, not mapped, needs little
	// scratch memory whatever the block size.
	weight := tensorfile.RowBlocks("engram-fp4/"+b+".weight", rows, cols/2, func(ctx context.Context, lo, hi int64, dst []byte) error {
		buf, unused := scratch.Get((hi - lo) * nb)
		defer scratch.Put(buf)
		return viewRows(t, lo, hi, func(src, sc []byte) error {
			codecs.EngramFP4(dst, unused, src, sc)
			return nil
		})
	})
	scale := tensorfile.RowBlocks("engram-fp4/"+b+".scale", rows, nb, func(ctx context.Context, lo, hi int64, dst []byte) error {
		for r := lo; r < hi; r += chunkRows {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(hi, r+chunkRows)
			err := viewRows(t, r, end, func(src, sc []byte) error {
				codecs.EngramScales(dst[(r-lo)*nb:(end-lo)*nb], src, sc)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	// Both read the source at memory speed.
	weight.Cheap, scale.Cheap = true, true
	return []tensorfile.Out{
		{Name: b + ".weight", DType: safetensors.I8, Shape: []int64{rows, cols / 2}, Data: weight,
			Codec: "engram_fp4", Sources: []*checkpoint.Tensor{t, t.Scale}},
		{Name: b + ".scale", DType: safetensors.F8E8M0, Shape: []int64{rows, nb}, Data: scale,
			Codec: "engram_fp4", Sources: []*checkpoint.Tensor{t, t.Scale}},
	}, true
}

// ConfigPatch sets quantization_config.engram_dtype when a table was
// transcoded (checkpoint.Config.QuantPatch says when config.json takes it).
func (e *Transcoder) ConfigPatch() map[string]any {
	return e.config.QuantPatch(len(e.tables), "engram_dtype", "fp4")
}

// Files is the report, TRANSCODE.json.
func (e *Transcoder) Files() map[string]*vfile.Node {
	return map[string]*vfile.Node{"TRANSCODE.json": {Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) {
		r, err := e.report(ctx)
		if err != nil {
			return nil, err
		}
		return vfile.JSON(r)
	})}}
}

// tableReport is one row of engram-fp4/TRANSCODE.json.
type tableReport struct {
	Table      string  `json:"table"`
	Shard      string  `json:"shard"`
	Rows       int64   `json:"rows"`
	Blocks     int64   `json:"blocks"`
	NaNBlocks  int64   `json:"nan_blocks"`
	CosineRows int64   `json:"cosine_rows"` // rows with a defined cosine
	MeanCosine float64 `json:"mean_cosine"`
}

// report is engram-fp4/TRANSCODE.json.
type report struct {
	View   string        `json:"view"`
	Codec  string        `json:"codec_version"`
	Tables []tableReport `json:"tables"`
}

// report transcodes every table once and measures it against the FP8
// decode: per-row cosine, averaged over all rows in row order.
func (e *Transcoder) report(ctx context.Context) (*report, error) {
	out := make([]tableReport, len(e.tables))
	for i, t := range e.tables {
		rows, cols := t.Shape[0], t.Shape[1]
		nb := cols / codecs.MXBlock
		chunks := (rows + chunkRows - 1) / chunkRows
		cos := make([]float64, rows)
		nan := make([]int64, chunks)
		eg, ctx := errgroup.WithContext(ctx)
		eg.SetLimit(workers())
		for c := range chunks {
			eg.Go(func() error {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				lo, hi := c*chunkRows, min(rows, (c+1)*chunkRows)
				buf, scr := scratch.Get((hi - lo) * (cols/2 + nb))
				defer scratch.Put(buf)
				codes, scales := scr[:(hi-lo)*cols/2], scr[(hi-lo)*cols/2:]
				return viewRows(t, lo, hi, func(src, sc []byte) error {
					nan[c] = codecs.EngramFP4(codes, scales, src, sc).NaNBlocks
					codecs.EngramCosine(cos[lo:hi], src, sc, codes, scales)
					return nil
				})
			})
		}
		if err := eg.Wait(); err != nil {
			return nil, fmt.Errorf("engram report: %w", err)
		}
		r := tableReport{Table: base(t.Name), Shard: t.Shard.Name, Rows: rows, Blocks: rows * nb}
		for _, n := range nan {
			r.NaNBlocks += n
		}
		// Rows whose cosine is undefined (NaN blocks, all zero) are left
		// out of the mean, as the seed does.
		var sum float64
		var counted int64
		for _, c := range cos {
			if !math.IsNaN(c) {
				sum += c
				counted++
			}
		}
		r.CosineRows = counted
		if counted > 0 {
			r.MeanCosine = sum / float64(counted)
		}
		out[i] = r
	}
	return &report{"engram-fp4", codecs.Version, out}, nil
}

// base strips a tensor name's last component (".weight", ".scale").
func base(name string) string { return strings.TrimSuffix(name, path.Ext(name)) }

// workers is how many goroutines a whole-checkpoint pass uses.
func workers() int { return runtime.GOMAXPROCS(0) }

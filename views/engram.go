package views

import (
	"context"
	"fmt"
	"math"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// engram transcodes FP8 Engram tables to FP4 with block-32 E8M0 scales
// (FORMATS.md "engram-fp4/").
type engram struct {
	config *checkpoint.Config
	tables []*checkpoint.Tensor
}

func engramRewriter(s *Set) (Rewriter, error) {
	e := &engram{config: s.Cat.Config}
	for _, t := range s.Cat.Tensors {
		if isEngramTable(t) {
			e.tables = append(e.tables, t)
		}
	}
	return e, nil
}

func (e *engram) String() string { return "engram-fp4" }

// isEngramTable reports whether t is an Engram table this view transcodes:
// E4M3 rows with a paired 1x32 E8M0 scale.
func isEngramTable(t *checkpoint.Tensor) bool {
	return t.Role == checkpoint.RoleEngram && t.DType == safetensors.F8E4M3 && len(t.Shape) == 2 &&
		t.Shape[1]%codecs.MXBlock == 0 && t.Scale != nil && t.Scale.DType == safetensors.F8E8M0 &&
		t.Block == [2]int64{1, codecs.MXBlock}
}

func (e *engram) Rewrite(t *checkpoint.Tensor) ([]tensorfile.Out, bool) {
	if t.ScaleOf != nil && isEngramTable(t.ScaleOf) {
		return nil, true // emitted with its table
	}
	if !isEngramTable(t) {
		return nil, false
	}
	rows, cols := t.Shape[0], t.Shape[1]
	nb := cols / codecs.MXBlock
	b := base(t.Name)
	// The scale block of many rows is computed a chunk of source rows at
	// a time, so its scratch memory stays small whatever the block size.
	read := func(lo, hi int64, src, sc []byte) error {
		if _, err := t.ReadAt(src[:(hi-lo)*cols], lo*cols); err != nil {
			return err
		}
		_, err := t.Scale.ReadAt(sc[:(hi-lo)*nb], lo*nb)
		return err
	}
	weight := tensorfile.RowBlocks("engram-fp4/"+b+".weight", rows, cols/2, func(ctx context.Context, lo, hi int64, dst []byte) error {
		src, sc := make([]byte, (hi-lo)*cols), make([]byte, (hi-lo)*nb)
		if err := read(lo, hi, src, sc); err != nil {
			return err
		}
		codecs.EngramFP4(dst, make([]byte, len(sc)), src, sc)
		return nil
	})
	scale := tensorfile.RowBlocks("engram-fp4/"+b+".scale", rows, nb, func(ctx context.Context, lo, hi int64, dst []byte) error {
		chunk := min(hi-lo, engramChunkRows)
		src, sc := make([]byte, chunk*cols), make([]byte, chunk*nb)
		for r := lo; r < hi; r += chunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(hi, r+chunk)
			if err := read(r, end, src, sc); err != nil {
				return err
			}
			n := (end - r) * nb
			codecs.EngramScales(dst[(r-lo)*nb:(r-lo)*nb+n], src[:(end-r)*cols], sc[:n])
		}
		return nil
	})
	return []tensorfile.Out{
		{Name: b + ".weight", DType: safetensors.I8, Shape: []int64{rows, cols / 2}, Data: weight,
			Codec: "engram_fp4", Sources: []*checkpoint.Tensor{t, t.Scale}},
		{Name: b + ".scale", DType: safetensors.F8E8M0, Shape: []int64{rows, nb}, Data: scale,
			Codec: "engram_fp4", Sources: []*checkpoint.Tensor{t, t.Scale}},
	}, true
}

func (e *engram) ConfigPatch() map[string]any {
	return quantConfigPatch(e.config, len(e.tables), "engram_dtype", "fp4")
}

func (e *engram) Files() map[string]*vfile.Node {
	return map[string]*vfile.Node{"TRANSCODE.json": jsonDoc(e.report)}
}

// engramReport is one row of engram-fp4/TRANSCODE.json.
type engramReport struct {
	Table      string  `json:"table"`
	Shard      string  `json:"shard"`
	Rows       int64   `json:"rows"`
	Blocks     int64   `json:"blocks"`
	NaNBlocks  int64   `json:"nan_blocks"`
	CosineRows int64   `json:"cosine_rows"` // rows with a defined cosine
	MeanCosine float64 `json:"mean_cosine"`
}

// engramChunkRows is how many rows the scale blocks and the report read at
// a time.
const engramChunkRows = 8192

// report transcodes every table once and measures it against the FP8
// decode: per-row cosine, averaged over all rows in row order.
func (e *engram) report(ctx context.Context) (any, error) {
	out := make([]engramReport, len(e.tables))
	for i, t := range e.tables {
		rows, cols := t.Shape[0], t.Shape[1]
		nb := cols / codecs.MXBlock
		chunks := (rows + engramChunkRows - 1) / engramChunkRows
		cos := make([]float64, rows)
		nan := make([]int64, chunks)
		eg, ctx := errgroup.WithContext(ctx)
		eg.SetLimit(workers())
		for c := range chunks {
			eg.Go(func() error {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				lo, hi := c*engramChunkRows, min(rows, (c+1)*engramChunkRows)
				src := make([]byte, (hi-lo)*cols)
				sc := make([]byte, (hi-lo)*nb)
				if _, err := t.ReadAt(src, lo*cols); err != nil {
					return err
				}
				if _, err := t.Scale.ReadAt(sc, lo*nb); err != nil {
					return err
				}
				codes := make([]byte, len(src)/2)
				scales := make([]byte, len(sc))
				nan[c] = codecs.EngramFP4(codes, scales, src, sc).NaNBlocks
				codecs.EngramCosine(cos[lo:hi], src, sc, codes, scales)
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			return nil, fmt.Errorf("engram report: %w", err)
		}
		r := engramReport{Table: base(t.Name), Shard: t.Shard.Name, Rows: rows, Blocks: rows * nb}
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
	return struct {
		View   string         `json:"view"`
		Codec  string         `json:"codec_version"`
		Tables []engramReport `json:"tables"`
	}{"engram-fp4", codecs.Version, out}, nil
}

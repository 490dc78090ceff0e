package nvfp4

import (
	"context"
	"slices"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"golang.org/x/sync/errgroup"
)

// expertReport is one row of nvfp4/TRANSCODE.json.
type expertReport struct {
	Tensor string `json:"tensor"`
	Shard  string `json:"shard"`
	G      int    `json:"g"`
	codecs.NVFP4Counts
}

// report is nvfp4/TRANSCODE.json.
type report struct {
	View    string             `json:"view"`
	Codec   string             `json:"codec_version"`
	Experts int                `json:"experts"`
	Totals  codecs.NVFP4Counts `json:"totals"`
	Tensors []expertReport     `json:"tensors"`
}

// counts returns the block counts of an expert weight whose scale bytes
// are sc, under global exponent g. Clamped blocks follow from the scales
// alone; only their codes are read, to tell whether they are lossy.
func counts(t *checkpoint.Tensor, sc []byte, g int) (codecs.NVFP4Counts, error) {
	const blockBytes = codecs.MXBlock / 2
	var clamped []int
	for i, b := range sc {
		if k := int(b) - 127 - g; b != codecs.E8M0NaN && (k < codecs.E4M3MinPow2 || k > codecs.E4M3MaxPow2) {
			clamped = append(clamped, i)
		}
	}
	// A tensor with many clamped blocks is read whole; otherwise only the
	// clamped blocks' codes, block by block.
	if len(clamped) > len(sc)/64 {
		var c codecs.NVFP4Counts
		err := t.View(0, t.Size, func(w []byte) error {
			c = codecs.CountNVFP4(w, sc, g)
			return nil
		})
		return c, err
	}
	c := codecs.NVFP4Counts{Blocks: int64(len(sc) - len(clamped))}
	for _, b := range sc {
		if b == codecs.E8M0NaN {
			c.NaN++
		}
	}
	var blk [blockBytes]byte
	for _, i := range clamped {
		if _, err := t.ReadAt(blk[:], int64(i*blockBytes)); err != nil {
			return codecs.NVFP4Counts{}, err
		}
		c.Add(codecs.CountNVFP4(blk[:], sc[i:i+1], g))
	}
	return c, nil
}

// report counts clamped and lossy blocks of every expert in parallel, a
// global-exponent group at a time: the group's exponent (group.g, kept for
// the weight_scale blocks), then each scale's counts, both looked at in
// place (checkpoint.Tensor.View), and the codes of clamped blocks.
func (n *Transcoder) report(ctx context.Context) (*report, error) {
	rows := make([]expertReport, len(n.experts))
	byGroup := make(map[*group][]int) // expert indices
	var order []*group
	for i, t := range n.experts {
		g := n.group(t)
		if byGroup[g] == nil {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(workers())
	for _, grp := range order {
		eg.Go(func() error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ge, err := grp.g()
			if err != nil {
				return err
			}
			return viewAll(grp.scales, nil, func(bufs [][]byte) error {
				for _, i := range byGroup[grp] {
					t := n.experts[i]
					k := slices.Index(grp.scales, t.Scale)
					c, err := counts(t, bufs[k], ge)
					if err != nil {
						return err
					}
					rows[i] = expertReport{Tensor: base(t.Name), Shard: t.Shard.Name, G: ge, NVFP4Counts: c}
				}
				return nil
			})
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var total codecs.NVFP4Counts
	for _, r := range rows {
		total.Add(r.NVFP4Counts)
	}
	return &report{"nvfp4", codecs.Version, len(rows), total, rows}, nil
}

// ScaleFacts are what manifest/ says of a weight_scale beside where its
// bytes come from.
type ScaleFacts struct {
	// GlobalExponent is g of the tensor's group: weight_scale_2 = 2^g.
	GlobalExponent int `json:"global_exponent"`
	// Blocks counts the source 32-blocks of the weight_scale that were
	// clamped, and of those lossy.
	Blocks codecs.NVFP4Counts `json:"blocks"`
}

// Describe returns the facts of the weight_scale of each of experts (the
// weights Rewrite transcoded), computed on all cores; the figures are
// those of TRANSCODE.json.
func (n *Transcoder) Describe(ctx context.Context, experts []*checkpoint.Tensor) ([]ScaleFacts, error) {
	facts := make([]ScaleFacts, len(experts))
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(workers())
	for i, t := range experts {
		eg.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			g, err := n.group(t).g()
			if err != nil {
				return err
			}
			return t.Scale.View(0, t.Scale.Size, func(sc []byte) error {
				c, err := counts(t, sc, g)
				facts[i] = ScaleFacts{GlobalExponent: g, Blocks: c}
				return err
			})
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return facts, nil
}

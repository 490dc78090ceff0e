package gguf

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
)

// Compute returns what computes rows [lo, hi) of part p into dst, as
// tensorfile.RowBlocks takes it: Fill, through the disk cache disk (nil
// for none) for a costly type (IQ2_XXS, Q2_K), whose encoder is a
// quantisation search worth keeping across mounts; the other types are
// rounded again, which costs less than reading them back. The function
// holds no more than it needs, since a checkpoint has one per part.
func (t *Tensor) Compute(p *Part, disk *diskcache.Cache) func(ctx context.Context, lo, hi int64, dst []byte) error {
	if disk == nil || !t.Type.costly() {
		return func(ctx context.Context, lo, hi int64, dst []byte) error { return t.Fill(ctx, *p, lo, hi, dst) }
	}
	return func(ctx context.Context, lo, hi int64, dst []byte) error {
		src, err := p.sourceBytes(lo, hi)
		if err != nil {
			return err
		}
		_, err = disk.Through(t.blockKey(p, hi-lo, src), dst, func(dst []byte) error {
			return t.Fill(ctx, *p, lo, hi, dst)
		})
		return err
	}
}

// blockKey is the disk-cache key of rows of part p made from src (the
// part's sourceBytes): as q2/'s blocks, the SHA-256 of the codec version,
// the type, the geometry and the source bytes (FORMATS.md).
func (t *Tensor) blockKey(p *Part, rows int64, src []byte) diskcache.Key {
	h := sha256.New()
	fmt.Fprintf(h, "dsfs gguf block\x00codec %s\x00%s\x00%d rows x %d weights\x00%s\x00", codecs.Version, t.Type.Name, rows, t.Ne[0], p.Src.DType)
	h.Write(src)
	return diskcache.Key(h.Sum(nil))
}

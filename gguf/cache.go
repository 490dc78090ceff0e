package gguf

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
)

// FillThrough is Fill through the disk cache disk (nil for none): rows of
// a costly type (IQ2_XXS, Q2_K), whose encoder is a quantisation search,
// are kept there across mounts; the others are rounded again, which costs
// less than reading them back.
func (t *Tensor) FillThrough(ctx context.Context, disk *diskcache.Cache, p Part, lo, hi int64, dst []byte) error {
	if disk == nil || !t.Type.costly() {
		return t.Fill(ctx, p, lo, hi, dst)
	}
	src, err := p.sourceBytes(lo, hi)
	if err != nil {
		return err
	}
	_, err = disk.Through(t.blockKey(p, hi-lo, src), dst, func(dst []byte) error {
		return t.Fill(ctx, p, lo, hi, dst)
	})
	return err
}

// blockKey is the disk-cache key of rows of part p made from src (the
// part's sourceBytes): as q2/'s blocks, the SHA-256 of the codec version,
// the type, the geometry and the source bytes.
func (t *Tensor) blockKey(p Part, rows int64, src []byte) diskcache.Key {
	h := sha256.New()
	fmt.Fprintf(h, "dsfs gguf block\x00codec %s\x00%s\x00%d rows x %d weights\x00%s\x00", codecs.Version, t.Type.Name, rows, t.Ne[0], p.Src.DType)
	h.Write(src)
	return diskcache.Key(h.Sum(nil))
}

package q2

import (
	"context"
	"fmt"

	"github.com/dsfs/dsfs/checkpoint"
)

// Quantisable reports whether q2/ quantises a source tensor to ggml
// blocks: a main-layer routed expert matrix, MXFP4 with its scale, whose
// rows are whole 256-weight blocks. gguf/ asks so that its quantised
// experts are exactly q2/'s tensors and can be served from q2/'s blocks.
func Quantisable(t *checkpoint.Tensor) bool {
	ok, _ := quantisable(t)
	return ok
}

// ExpertType is the ggml type q2/ quantises a routed expert projection to:
// Q2_K for down (w2), IQ2_XXS for gate and up (w1, w3).
func ExpertType(t *checkpoint.Tensor) *GGMLType { return typeOf(t.Proj) }

// QuantiseRows writes rows [lo, hi) of a quantisable tensor into dst as
// q2/'s blocks hold them (the exact MXFP4 decode, then the type's
// quantiser), through no cache: for a caller holding no Plan.
func QuantiseRows(ctx context.Context, t *checkpoint.Tensor, lo, hi int64, dst []byte) error {
	if !Quantisable(t) {
		return fmt.Errorf("%s: tensor %s: not a tensor q2/ quantises", t.Shard.Name, t.Name)
	}
	qt := newQuantised(t)
	if lo < 0 || hi > t.Shape[0] || lo > hi || int64(len(dst)) != (hi-lo)*qt.Shape[1] {
		return fmt.Errorf("%s: tensor %s: rows %d-%d into %d bytes do not fit %v", t.Shard.Name, t.Name, lo, hi, len(dst), t.Shape)
	}
	w, sc, err := qt.ReadSource(lo, hi)
	if err != nil {
		return fmt.Errorf("%s: tensor %s: %w", t.Shard.Name, t.Name, err)
	}
	return qt.Quantise(ctx, w, sc, dst)
}

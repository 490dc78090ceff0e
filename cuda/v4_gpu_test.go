package cuda

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/trace/v4"
)

var _ v4.DeviceOps = (*Backend)(nil)

// openV4Tiny opens the v4-tiny reference checkpoint.
func openV4Tiny(t *testing.T) *v4.Model {
	t.Helper()
	dir := filepath.Join(testdata.Dir(t), "trace", "v4-tiny")
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := v4.Open(cat, inf)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestV4ForwardMatchesCPU runs every layer of v4-tiny and its logits in
// both V4 precisions with the backend (products, act quant, Hadamard and
// sparse attention on the GPU) and on the host engine, each layer fed the
// host's output of the one before: routes and indexer picks agree where
// the decision is clear of a tie, activations within float32 rounding
// (a8: within a few FP8 steps of an element, which a summation-order
// difference can move across a rounding boundary).
func TestV4ForwardMatchesCPU(t *testing.T) {
	b := requireGPU(t, FP32)
	host, dev := openV4Tiny(t), openV4Tiny(t)
	dev.SetBackend(b)
	seq := []int{0, 17, 101, 433, 5, 290, 77, 12, 64, 301, 2, 9, 480, 33, 150, 211}
	for _, p := range []v4.Precision{v4.FP32, v4.A8} {
		tol := 1e-4
		if p == v4.A8 {
			tol = 2e-3
		}
		emb, err := host.EmbedRows(seq)
		if err != nil {
			t.Fatal(err)
		}
		n, d := host.Config.HCMult, host.Config.Hidden
		stream := make([]float32, 0, len(emb)*n)
		for r := 0; r < len(emb); r += d {
			for range n {
				stream = append(stream, emb[r:r+d]...)
			}
		}
		for l := range host.Config.Layers {
			want, err := host.Forward(context.Background(), l, stream, [][]int{seq}, p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dev.Forward(context.Background(), l, stream, [][]int{seq}, p)
			if err != nil {
				t.Fatalf("%s layer %d: %v", p, l, err)
			}
			where := fmt.Sprintf("%s layer %d", p, l)
			k := want.Routes.K
			for tok, m := range want.Routes.Margin {
				a := slices.Sorted(slices.Values(got.Routes.IDs[tok*k : (tok+1)*k]))
				w := slices.Sorted(slices.Values(want.Routes.IDs[tok*k : (tok+1)*k]))
				if !slices.Equal(a, w) && m > 1e-3 {
					t.Errorf("%s: token %d experts %v, want %v (margin %.3g)", where, tok, a, w, m)
				}
			}
			for i, s := range want.Seqs {
				g := got.Seqs[i]
				for tok, m := range s.IndexMargin {
					k := s.IndexK
					if !slices.Equal(g.IndexTopK[tok*k:(tok+1)*k], s.IndexTopK[tok*k:(tok+1)*k]) && m > 1e-3 {
						t.Errorf("%s: token %d indexer picks %v, want %v (margin %.3g)", where, tok, g.IndexTopK[tok*k:(tok+1)*k], s.IndexTopK[tok*k:(tok+1)*k], m)
					}
				}
				closeTo(t, where+" compressed_kv", g.Compressed, s.Compressed, tol)
			}
			closeTo(t, where+" attn_out", got.AttnOut, want.AttnOut, tol)
			closeTo(t, where+" ffn_out", got.FFNOut, want.FFNOut, tol)
			closeTo(t, where+" stream_out", got.StreamOut, want.StreamOut, tol)
			stream = want.StreamOut
		}
		want, err := host.Logits(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dev.Logits(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, string(p)+" logits", got.Logits, want.Logits, tol)
	}
}

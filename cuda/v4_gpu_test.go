package cuda

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/internal/v4tiny"
	"github.com/dsfs/dsfs/trace/v4"
)

var _ v4.DeviceOps = (*Backend)(nil)

// agreeRoutes checks that each token chose the experts the host chose
// wherever its decision was clear of a tie.
func agreeRoutes(t *testing.T, where string, got, want v4.Routes) {
	t.Helper()
	k := want.K
	for tok, m := range want.Margin {
		a := slices.Sorted(slices.Values(got.IDs[tok*k : (tok+1)*k]))
		w := slices.Sorted(slices.Values(want.IDs[tok*k : (tok+1)*k]))
		if !slices.Equal(a, w) && m > 1e-3 {
			t.Errorf("%s: token %d experts %v, want %v (margin %.3g)", where, tok, a, w, m)
		}
	}
}

// agreePicks checks that each query's indexer picks (k a query) are the
// host's wherever its decision was clear of a tie.
func agreePicks(t *testing.T, where string, got, want []int32, k int, margin []float32) {
	t.Helper()
	for tok, m := range margin {
		if !slices.Equal(got[tok*k:(tok+1)*k], want[tok*k:(tok+1)*k]) && m > 1e-3 {
			t.Errorf("%s: token %d indexer picks %v, want %v (margin %.3g)", where, tok, got[tok*k:(tok+1)*k], want[tok*k:(tok+1)*k], m)
		}
	}
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
	tiny := filepath.Join(testdata.Dir(t), "trace", "v4-tiny")
	host, dev := v4tiny.Open(t, tiny), v4tiny.Open(t, tiny)
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
		stream := host.Config.InitialStream(emb)
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
			agreeRoutes(t, where, got.Routes, want.Routes)
			for i, s := range want.Seqs {
				g := got.Seqs[i]
				agreePicks(t, where, g.IndexTopK, s.IndexTopK, s.IndexK, s.IndexMargin)
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

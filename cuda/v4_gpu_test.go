package cuda

import (
	"context"
	"fmt"
	"github.com/dsfs/dsfs/trace/backend"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/internal/v4tiny"
	"github.com/dsfs/dsfs/trace/v4"
)

var _ backend.V4Ops = (*Backend)(nil)

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
			where := fmt.Sprintf("%s layer %d", p, l)
			want, got := forwardBoth(t, where, func(m *v4.Model) (*v4.LayerOutput, error) {
				return m.Forward(context.Background(), l, stream, [][]int{seq}, p)
			}, host, dev)
			agreeRoutes(t, where, got.Routes, want.Routes)
			for i, s := range want.Seqs {
				g := got.Seqs[i]
				agreePicks(t, where, g.IndexTopK, s.IndexTopK, s.IndexK, s.IndexMargin)
				closeTo(t, where+" compressed_kv", g.Compressed, s.Compressed, tol)
			}
			closeOuts(t, where, [3][]float32{got.AttnOut, got.FFNOut, got.StreamOut}, [3][]float32{want.AttnOut, want.FFNOut, want.StreamOut}, tol)
			stream = want.StreamOut
		}
		closeLogits(t, p, func(m *v4.Model) ([]float32, error) {
			f, err := m.Logits(context.Background(), stream)
			if err != nil {
				return nil, err
			}
			return f.Logits, nil
		}, host, dev, tol)
	}
}

// forwardBoth runs one layer, forward, on the host model and then on the
// device model, failing t on either's error.
func forwardBoth[M, O any](t *testing.T, where string, forward func(M) (O, error), host, dev M) (want, got O) {
	t.Helper()
	want, err := forward(host)
	if err != nil {
		t.Fatal(err)
	}
	got, err = forward(dev)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return want, got
}

// closeOuts compares a layer's attn_out, ffn_out and stream_out on the
// device (got) with the host's (want).
func closeOuts(t *testing.T, where string, got, want [3][]float32, tol float64) {
	t.Helper()
	for i, name := range []string{"attn_out", "ffn_out", "stream_out"} {
		closeTo(t, where+" "+name, got[i], want[i], tol)
	}
}

// closeLogits compares the device model's logits with the host model's.
func closeLogits[M any](t *testing.T, p v4.Precision, logits func(M) ([]float32, error), host, dev M, tol float64) {
	t.Helper()
	want, err := logits(host)
	if err != nil {
		t.Fatal(err)
	}
	got, err := logits(dev)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, string(p)+" logits", got, want, tol)
}

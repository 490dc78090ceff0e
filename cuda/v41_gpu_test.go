package cuda

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/internal/v4tiny"
	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/v4"
)

var _ backend.V41Ops = (*Backend)(nil)

// TestQuantKernelsMatchHost runs the activation fake-quantisers the V4
// and V4.1 forwards use on the device (E4M3 and E2M1 with power-of-two
// scales in V4's and V4.1's blocks, and V4.1's E2M1 with E4M3 scales per
// 16) over random rows spanning many magnitudes, tiny blocks (the amax
// floors) and halfway values, and checks them bit for bit against the
// host functions.
func TestQuantKernelsMatchHost(t *testing.T) {
	b := requireGPU(t, FP32)
	rng := newRand(t)
	const rows, cols = 64, 512
	x := make([]float32, rows*cols)
	for r := range rows {
		scale := math.Ldexp(1, rng.IntN(40)-30)
		for c := range cols {
			v := rng.NormFloat64() * scale
			switch rng.IntN(8) {
			case 0: // a value halfway between two E2M1 or E4M3 steps
				v = math.Ldexp(float64(2*rng.IntN(16)+1), rng.IntN(8)-12)
			case 1:
				v = 0
			}
			x[r*cols+c] = float32(v)
		}
	}
	for _, tc := range []struct {
		name  string
		block int
		dev   func(backend.Mat, int)
		host  func([]float32, int)
	}{
		{"E4M3/32", 32, func(m backend.Mat, k int) { b.ActQuant(m, k, false) }, simd.QuantE4M3},
		{"E4M3/128", 128, func(m backend.Mat, k int) { b.ActQuant(m, k, false) }, simd.QuantE4M3},
		{"E2M1/32", 32, func(m backend.Mat, k int) { b.ActQuant(m, k, true) }, simd.QuantE2M1},
		{"E2M1-E4M3/16", 16, b.FP4QuantE4M3, v4.FP4QuantE4M3},
	} {
		want := slices.Clone(x)
		tc.host(want, tc.block)
		buf := upload(b, x)
		tc.dev(backend.Whole(buf, rows, cols), tc.block)
		got, err := download(b, buf)
		b.Free(buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("%s: value %d (%g): device %g, host %g", tc.name, i, x[i], got[i], want[i])
				break
			}
		}
	}
}

// TestV41ForwardMatchesCPU runs every layer of v41-tiny (every CSA2 role
// and its Engram layers) and its logits in both precisions with the
// backend (products, window and index quantisation, the FP4 KV with E4M3
// scales and sparse attention on the GPU) and on the host engine, each
// layer fed the host's state leaving the one before: Engram hash ids
// identical; routes, indexer picks and candidate blocks equal where the
// decision is clear of a tie; activations within float32 rounding (a8:
// within a few FP8 steps of an element).
func TestV41ForwardMatchesCPU(t *testing.T) {
	b := requireGPU(t, FP32)
	tiny := filepath.Join(testdata.Dir(t), "trace", "v41-tiny")
	host, dev := v4tiny.Open41(t, tiny), v4tiny.Open41(t, tiny)
	dev.SetBackend(b)
	seq := []int{0, 17, 101, 433, 5, 290, 77, 12, 64, 301, 2, 9, 480, 33, 150, 211, 17, 101, 433, 5, 7, 8, 300, 42}
	for i := range seq {
		seq[i] %= host.Config.Vocab
	}
	for _, p := range []v4.Precision{v4.FP32, v4.A8} {
		tol := 1e-4
		if p == v4.A8 {
			tol = 2e-3
		}
		emb, err := host.EmbedRows(seq)
		if err != nil {
			t.Fatal(err)
		}
		st := host.Config.InitialState41(emb, 1)
		for l := range host.Config.Layers {
			want, got := forwardBoth(t, fmt.Sprintf("%s layer %d", p, l), func(m *v4.Model41) (*v4.LayerOutput41, error) {
				return m.Forward(context.Background(), l, st, [][]int{seq}, p)
			}, host, dev)
			where := fmt.Sprintf("%s layer %d (%s)", p, l, want.Role.Role)
			if want.Engram != nil && !slices.Equal(got.Engram.HashIDs, want.Engram.HashIDs) {
				t.Errorf("%s: Engram hash ids differ", where)
			}
			agreeRoutes(t, where, got.Routes, want.Routes)
			for i, s := range want.Seqs {
				g := got.Seqs[i]
				agreePicks(t, where, g.IndexTopK, s.IndexTopK, s.IndexK, s.IndexMargin)
				nc := len(s.Candidates) / max(len(s.CandMargin), 1)
				for tok, m := range s.CandMargin {
					if !slices.Equal(g.Candidates[tok*nc:(tok+1)*nc], s.Candidates[tok*nc:(tok+1)*nc]) && m > 1e-3 {
						t.Errorf("%s: token %d candidate blocks differ (margin %.3g)", where, tok, m)
					}
				}
				closeTo(t, where+" compressed_kv", g.Compressed, s.Compressed, tol)
			}
			if want.Engram != nil {
				closeTo(t, where+" engram_gate", got.Engram.Gate, want.Engram.Gate, tol)
			}
			closeOuts(t, where, [3][]float32{got.AttnOut, got.FFNOut, got.StreamOut}, [3][]float32{want.AttnOut, want.FFNOut, want.StreamOut}, tol)
			closeTo(t, where+" pre_mix_out", got.PreMixOut, want.PreMixOut, tol)
			st = want.Out
		}
		closeLogits(t, p, func(m *v4.Model41) ([]float32, error) {
			f, err := m.Logits(context.Background(), st)
			if err != nil {
				return nil, err
			}
			return f.Logits, nil
		}, host, dev, tol)
	}
}

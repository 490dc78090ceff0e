package v4

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/trace/backend"
)

func (h *hostOps) FP4QuantE4M3(x backend.Mat, block int) {
	h.calls["FP4QuantE4M3"]++
	v := h.whole(x)
	FP4QuantE4M3(v, block)
	h.Upload(x.Buf, 0, v)
}

// TestBackendMatchesHost41 runs every layer of v41-tiny on the golden
// state entering it, and the logits, in both precisions, through a
// backend.Backend (the CPU one alone, and with backend.V4Ops and backend.V41Ops)
// and on the host engine: every output, every discrete choice and the
// shared attention state handed on are identical bit for bit.
func TestBackendMatchesHost41(t *testing.T) {
	host, g := loadGolden41(t)
	ops := &hostOps{CPU: backend.NewCPU(), calls: map[string]int{}}
	for _, tc := range []struct {
		name string
		b    backend.Backend
	}{{"cpu", backend.NewCPU()}, {"cpu+ops", ops}} {
		dev := open41Dir(t, filepath.Join(testdata.Dir(t), "trace", "v41-tiny"))
		dev.SetBackend(tc.b)
		if dev.Backend() != tc.b {
			t.Fatal("Backend() is not what SetBackend set")
		}
		for si, s := range g.Sequences {
			for _, p := range []Precision{A8, FP32} {
				gm := s.Modes[string(p)]
				var last *State41
				for l := range host.Config.Layers {
					where := fmt.Sprintf("%s seq %d %s layer %d", tc.name, si, p, l)
					in := goldenState41(t, host.Config, gm.Layers, l)
					want, err := host.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, p)
					if err != nil {
						t.Fatal(err)
					}
					got, err := dev.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, p)
					if err != nil {
						t.Fatal(err)
					}
					sameLayer41(t, where, got, want)
					last = want.Out
				}
				want, err := host.Logits(context.Background(), last)
				if err != nil {
					t.Fatal(err)
				}
				got, err := dev.Logits(context.Background(), last)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Logits, want.Logits) {
					t.Errorf("%s seq %d %s: logits differ from the host engine's (max rel %g)", tc.name, si, p, relDiff(got.Logits, want.Logits))
				}
			}
		}
	}
	for _, op := range []string{"ActQuant", "SparseAttention", "FP4QuantE4M3"} {
		if ops.calls[op] == 0 {
			t.Errorf("%s never called", op)
		}
	}
}

// sameLayer41 fails t where got and want, two V4.1 layer outputs, differ
// in any bit.
func sameLayer41(t *testing.T, where string, got, want *LayerOutput41) {
	t.Helper()
	type f32s struct {
		name      string
		got, want []float32
	}
	type i32s struct {
		name      string
		got, want []int32
	}
	f32 := []f32s{
		{"attn_in", got.AttnIn, want.AttnIn}, {"window_kv", got.WindowKV, want.WindowKV},
		{"attn_out", got.AttnOut, want.AttnOut}, {"ffn_out", got.FFNOut, want.FFNOut},
		{"stream_out", got.StreamOut, want.StreamOut}, {"pre_mix_out", got.PreMixOut, want.PreMixOut},
		{"topk_weights", got.Routes.Weights, want.Routes.Weights},
	}
	i32 := []i32s{{"routes", got.Routes.IDs, want.Routes.IDs}}
	if (got.Engram == nil) != (want.Engram == nil) {
		t.Fatalf("%s: Engram ran on one engine only", where)
	}
	if e := want.Engram; e != nil {
		f32 = append(f32, f32s{"engram_gate", got.Engram.Gate, e.Gate}, f32s{"engram_stream", got.Engram.Stream, e.Stream})
		i32 = append(i32, i32s{"engram_ids", got.Engram.HashIDs, e.HashIDs})
	}
	if len(got.Seqs) != len(want.Seqs) {
		t.Fatalf("%s: %d sequences, want %d", where, len(got.Seqs), len(want.Seqs))
	}
	for i, w := range want.Seqs {
		g := got.Seqs[i]
		f32 = append(f32, f32s{"compressed_kv", g.Compressed, w.Compressed}, f32s{"index_keys", g.IndexKeys, w.IndexKeys},
			f32s{"index_scores", g.IndexScores, w.IndexScores}, f32s{"block_scores", g.BlockScores, w.BlockScores})
		i32 = append(i32, i32s{"topk", g.TopK, w.TopK}, i32s{"index_topk", g.IndexTopK, w.IndexTopK})
		if !slices.Equal(g.Candidates, w.Candidates) {
			t.Errorf("%s: candidate mask differs", where)
		}
	}
	for _, c := range f32 {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %s differs from the host engine's (max rel %g)", where, c.name, relDiff(c.got, c.want))
		}
	}
	for _, c := range i32 {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %s differ from the host engine's", where, c.name)
		}
	}
}

// TestBackendShortPrompts41 runs a batch of prompts of 0 to 3 tokens
// (no compressed entry yet in ratio-2 layers, no query at all in one:
// empty products, quantisers and index sets) through every v41-tiny layer on the CPU backend with
// backend.V4Ops and backend.V41Ops, bit for bit the host engine's.
func TestBackendShortPrompts41(t *testing.T) {
	host, _ := loadGolden41(t)
	dev := open41Dir(t, filepath.Join(testdata.Dir(t), "trace", "v41-tiny"))
	dev.SetBackend(&hostOps{CPU: backend.NewCPU(), calls: map[string]int{}})
	seqs := [][]int{{5}, {}, {7, 300}, {9, 10, 11}}
	var ids []int
	for _, s := range seqs {
		ids = append(ids, s...)
	}
	emb, err := host.EmbedRows(ids)
	if err != nil {
		t.Fatal(err)
	}
	st := host.Config.InitialState41(emb, len(seqs))
	for l := range host.Config.Layers {
		want, err := host.Forward(context.Background(), l, st, seqs, A8)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dev.Forward(context.Background(), l, st, seqs, A8)
		if err != nil {
			t.Fatalf("layer %d on the backend: %v", l, err)
		}
		sameLayer41(t, fmt.Sprintf("short prompts layer %d", l), got, want)
		st = want.Out
	}
}

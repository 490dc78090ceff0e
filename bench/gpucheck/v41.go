package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/trace/v4"
)

// v41Tiny runs every layer of the v41-tiny reference checkpoint (every
// CSA2 role, two Engram layers) and its logits in both precisions with
// the float32 CUDA backend (products, window and index quantisation, the
// FP4 KV with E4M3 scales, sparse attention on the GPU) and on the host
// engine, each layer fed the host's state leaving the one before. It
// prints max|Δ| / max|ref| per tensor, the routes, indexer picks and
// candidate blocks that agree where the host's margin exceeds minMargin,
// whether the Engram hash ids are identical, and the median time of a
// layer's forward on each.
func (c *checker) v41Tiny(dir string) error {
	open := func() (*v4.Model41, error) {
		cat, err := checkpoint.Open(dir)
		if err != nil {
			return nil, err
		}
		inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
		if err != nil {
			return nil, err
		}
		tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			return nil, err
		}
		return v4.Open41(cat, inf, tj)
	}
	host, err := open()
	if err != nil {
		return err
	}
	dev, err := open()
	if err != nil {
		return err
	}
	dev.SetBackend(c.gpus[0])
	seq := []int{0, 17, 101, 433, 5, 290, 77, 12, 64, 301, 2, 9, 480, 33, 150, 211, 17, 101, 433, 5, 7, 8, 300, 42}
	for i := range seq {
		seq[i] %= host.Config.Vocab
	}
	emb, err := host.EmbedRows(seq)
	if err != nil {
		return err
	}
	fmt.Printf("\nDeepSeek-V4.1 (v41-tiny, %d layers, %d tokens): CUDA fp32 vs the host engine, max|Δ|/max|ref| (limit %.0e)\n", host.Config.Layers, len(seq), tolerance)
	fmt.Printf("%-5s %9s %9s %10s %9s %9s %9s %9s %7s %11s %11s\n", "prec", "attn_out", "ffn_out", "stream_out", "logits",
		"routes", "picks", "cands", "engram", "host ms/l", "cuda ms/l")
	for _, p := range []v4.Precision{v4.FP32, v4.A8} {
		var errs [4]float64
		var agree, routed, pAgree, picked, cAgree, cands int
		engram := "same"
		var th, tg []time.Duration
		for rep := range c.reps {
			st := host.Config.InitialState41(emb, 1)
			for l := range host.Config.Layers {
				start := time.Now()
				want, err := host.Forward(context.Background(), l, st, [][]int{seq}, p)
				if err != nil {
					return err
				}
				th = append(th, time.Since(start))
				start = time.Now()
				got, err := dev.Forward(context.Background(), l, st, [][]int{seq}, p)
				if err != nil {
					return fmt.Errorf("v41-tiny %s layer %d on cuda: %w", p, l, err)
				}
				tg = append(tg, time.Since(start))
				st = want.Out
				if rep > 0 {
					continue
				}
				for i, pr := range [][2][]float32{{got.AttnOut, want.AttnOut}, {got.FFNOut, want.FFNOut}, {got.StreamOut, want.StreamOut}} {
					errs[i] = max(errs[i], relErr(pr[0], pr[1], nil))
				}
				if want.Engram != nil && !slices.Equal(got.Engram.HashIDs, want.Engram.HashIDs) {
					engram = "DIFFER"
				}
				k := want.Routes.K
				for tok, m := range want.Routes.Margin {
					if m <= minMargin {
						continue
					}
					routed++
					if slices.Equal(slices.Sorted(slices.Values(got.Routes.IDs[tok*k:(tok+1)*k])), slices.Sorted(slices.Values(want.Routes.IDs[tok*k:(tok+1)*k]))) {
						agree++
					}
				}
				for i, s := range want.Seqs {
					g := got.Seqs[i]
					for tok, m := range s.IndexMargin {
						if m <= minMargin {
							continue
						}
						picked++
						k := s.IndexK
						if slices.Equal(g.IndexTopK[tok*k:(tok+1)*k], s.IndexTopK[tok*k:(tok+1)*k]) {
							pAgree++
						}
					}
					nc := len(s.Candidates) / max(len(s.CandMargin), 1)
					for tok, m := range s.CandMargin {
						if m <= minMargin {
							continue
						}
						cands++
						if slices.Equal(g.Candidates[tok*nc:(tok+1)*nc], s.Candidates[tok*nc:(tok+1)*nc]) {
							cAgree++
						}
					}
				}
			}
			if rep == 0 {
				want, err := host.Logits(context.Background(), st)
				if err != nil {
					return err
				}
				got, err := dev.Logits(context.Background(), st)
				if err != nil {
					return err
				}
				errs[3] = relErr(got.Logits, want.Logits, nil)
			}
		}
		fmt.Printf("%-5s %9.2e %9.2e %10.2e %9.2e %4d/%-4d %4d/%-4d %4d/%-4d %7s %11.2f %11.2f\n", p, errs[0], errs[1], errs[2], errs[3],
			agree, routed, pAgree, picked, cAgree, cands, engram, median(th), median(tg))
		if slices.Max(errs[:]) > tolerance || agree != routed || pAgree != picked || cAgree != cands || engram != "same" {
			c.failed = true
		}
	}
	return nil
}

var _ v4.DeviceOps41 = (*cuda.Backend)(nil)

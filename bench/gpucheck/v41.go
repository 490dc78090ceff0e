package main

import (
	"context"
	"fmt"
	"github.com/dsfs/dsfs/trace/backend"
	"slices"
	"time"

	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/tokenizer"
	v4 "github.com/dsfs/dsfs/trace/v4"
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
		cat, files, err := readCheckpoint(dir, "inference/config.json", "tokenizer.json")
		if err != nil {
			return nil, err
		}
		tok, err := tokenizer.Parse(files[1])
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: %w", err)
		}
		return v4.Open41(cat, files[0], tok)
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
		var routes, picks, cands agreement
		engram := "same"
		var th, tg []time.Duration
		for rep := range c.reps {
			st := host.Config.InitialState41(emb, 1)
			for l := range host.Config.Layers {
				want, got, err := timedLayer("v41-tiny", p, l, &th, &tg, func(m *v4.Model41) (*v4.LayerOutput41, error) {
					return m.Forward(context.Background(), l, st, [][]int{seq}, p)
				}, host, dev)
				if err != nil {
					return err
				}
				st = want.Out
				if rep > 0 {
					continue
				}
				raiseOutErrs(&errs, [3][]float32{got.AttnOut, got.FFNOut, got.StreamOut}, [3][]float32{want.AttnOut, want.FFNOut, want.StreamOut})
				if want.Engram != nil && !slices.Equal(got.Engram.HashIDs, want.Engram.HashIDs) {
					engram = "DIFFER"
				}
				tally(&routes, got.Routes.IDs, want.Routes.IDs, want.Routes.Margin, want.Routes.K, sameSet)
				for i, s := range want.Seqs {
					g := got.Seqs[i]
					tally(&picks, g.IndexTopK, s.IndexTopK, s.IndexMargin, s.IndexK, slices.Equal)
					nc := len(s.Candidates) / max(len(s.CandMargin), 1)
					tally(&cands, g.Candidates, s.Candidates, s.CandMargin, nc, slices.Equal)
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
			routes.agree, routes.decided, picks.agree, picks.decided, cands.agree, cands.decided, engram, median(th), median(tg))
		if slices.Max(errs[:]) > tolerance || !routes.ok() || !picks.ok() || !cands.ok() || engram != "same" {
			c.failed = true
		}
	}
	return nil
}

var _ backend.V41Ops = (*cuda.Backend)(nil)

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

// v4Tiny runs every layer of the v4-tiny reference checkpoint and its
// logits in both V4 precisions with the float32 CUDA backend (products,
// act quant, Hadamard, sparse attention on the GPU) and on the host V4
// engine, each layer fed the host's output of the one before. It prints
// max|Δ| / max|ref| per tensor, the routes and indexer picks that agree
// where the host's margin exceeds minMargin, and the median time of a
// layer's forward on each.
func (c *checker) v4Tiny(dir string) error {
	open := func() (*v4.Model, error) {
		cat, err := checkpoint.Open(dir)
		if err != nil {
			return nil, err
		}
		inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
		if err != nil {
			return nil, err
		}
		return v4.Open(cat, inf)
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
	seq := []int{0, 17, 101, 433, 5, 290, 77, 12, 64, 301, 2, 9, 480, 33, 150, 211}
	emb, err := host.EmbedRows(seq)
	if err != nil {
		return err
	}
	n, d := host.Config.HCMult, host.Config.Hidden
	in := make([]float32, 0, len(emb)*n)
	for r := 0; r < len(emb); r += d {
		for range n {
			in = append(in, emb[r:r+d]...)
		}
	}
	fmt.Printf("\nDeepSeek-V4 (v4-tiny, %d layers, %d tokens): CUDA fp32 vs the host V4 engine, max|Δ|/max|ref| (limit %.0e)\n", host.Config.Layers, len(seq), tolerance)
	fmt.Printf("%-5s %9s %9s %10s %9s %9s %9s %11s %11s\n", "prec", "attn_out", "ffn_out", "stream_out", "logits", "routes", "picks", "host ms/l", "cuda ms/l")
	for _, p := range []v4.Precision{v4.FP32, v4.A8} {
		var errs [4]float64
		var agree, routed, pAgree, picked int
		var th, tg []time.Duration
		for rep := range c.reps {
			stream := in
			for l := range host.Config.Layers {
				start := time.Now()
				want, err := host.Forward(context.Background(), l, stream, [][]int{seq}, p)
				if err != nil {
					return err
				}
				th = append(th, time.Since(start))
				start = time.Now()
				got, err := dev.Forward(context.Background(), l, stream, [][]int{seq}, p)
				if err != nil {
					return fmt.Errorf("v4-tiny %s layer %d on cuda: %w", p, l, err)
				}
				tg = append(tg, time.Since(start))
				stream = want.StreamOut
				if rep > 0 {
					continue
				}
				for i, pr := range [][2][]float32{{got.AttnOut, want.AttnOut}, {got.FFNOut, want.FFNOut}, {got.StreamOut, want.StreamOut}} {
					errs[i] = max(errs[i], relErr(pr[0], pr[1], nil))
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
					for tok, m := range s.IndexMargin {
						if m <= minMargin {
							continue
						}
						picked++
						k := s.IndexK
						if slices.Equal(got.Seqs[i].IndexTopK[tok*k:(tok+1)*k], s.IndexTopK[tok*k:(tok+1)*k]) {
							pAgree++
						}
					}
				}
			}
			if rep == 0 {
				want, err := host.Logits(context.Background(), stream)
				if err != nil {
					return err
				}
				got, err := dev.Logits(context.Background(), stream)
				if err != nil {
					return err
				}
				errs[3] = relErr(got.Logits, want.Logits, nil)
			}
		}
		fmt.Printf("%-5s %9.2e %9.2e %10.2e %9.2e %4d/%-4d %4d/%-4d %11.2f %11.2f\n", p, errs[0], errs[1], errs[2], errs[3],
			agree, routed, pAgree, picked, median(th), median(tg))
		if slices.Max(errs[:]) > tolerance || agree != routed || pAgree != picked {
			c.failed = true
		}
	}
	return nil
}

var _ v4.DeviceOps = (*cuda.Backend)(nil)

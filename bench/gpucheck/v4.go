package main

import (
	"context"
	"fmt"
	"github.com/dsfs/dsfs/trace/backend"
	"slices"
	"time"

	"github.com/dsfs/dsfs/cuda"
	v4 "github.com/dsfs/dsfs/trace/v4"
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
		cat, files, err := readCheckpoint(dir, "inference/config.json")
		if err != nil {
			return nil, err
		}
		return v4.Open(cat, files[0])
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
		var routes, picks agreement
		var th, tg []time.Duration
		for rep := range c.reps {
			stream := in
			for l := range host.Config.Layers {
				want, got, err := timedLayer("v4-tiny", p, l, &th, &tg, func(m *v4.Model) (*v4.LayerOutput, error) {
					return m.Forward(context.Background(), l, stream, [][]int{seq}, p)
				}, host, dev)
				if err != nil {
					return err
				}
				stream = want.StreamOut
				if rep > 0 {
					continue
				}
				raiseOutErrs(&errs, [3][]float32{got.AttnOut, got.FFNOut, got.StreamOut}, [3][]float32{want.AttnOut, want.FFNOut, want.StreamOut})
				tally(&routes, got.Routes.IDs, want.Routes.IDs, want.Routes.Margin, want.Routes.K, sameSet)
				for i, s := range want.Seqs {
					tally(&picks, got.Seqs[i].IndexTopK, s.IndexTopK, s.IndexMargin, s.IndexK, slices.Equal)
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
			routes.agree, routes.decided, picks.agree, picks.decided, median(th), median(tg))
		if slices.Max(errs[:]) > tolerance || !routes.ok() || !picks.ok() {
			c.failed = true
		}
	}
	return nil
}

// timedLayer runs layer l of model at precision p, forward, on the host
// model and then on the device model, appending each run's time to th and
// tg.
func timedLayer[M, O any](model string, p v4.Precision, l int, th, tg *[]time.Duration, forward func(M) (O, error), host, dev M) (want, got O, err error) {
	start := time.Now()
	if want, err = forward(host); err != nil {
		return want, got, err
	}
	*th = append(*th, time.Since(start))
	start = time.Now()
	if got, err = forward(dev); err != nil {
		return want, got, fmt.Errorf("%s %s layer %d on cuda: %w", model, p, l, err)
	}
	*tg = append(*tg, time.Since(start))
	return want, got, nil
}

// raiseOutErrs raises errs[0:3] to the relative errors of the device's
// attn_out, ffn_out and stream_out against the host's.
func raiseOutErrs(errs *[4]float64, got, want [3][]float32) {
	for i := range got {
		errs[i] = max(errs[i], relErr(got[i], want[i], nil))
	}
}

var _ backend.V4Ops = (*cuda.Backend)(nil)

package deepseek2

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace/backend"
)

// v2LiteLayer is one MoE layer of DeepSeek-V2-Lite's shape: hidden 2048,
// 16 heads (nope 128, rope 64, v 128), kv_lora 512, 64 routed experts of
// width 1408 with 6 per token, 2 shared.
func v2LiteLayer() synth.MLASpec {
	return synth.MLASpec{
		Seed: 9, Hidden: 2048, Vocab: 1024, Layers: 1, DenseLayers: 0, MoEInter: 1408,
		Heads: 16, KVLoRA: 512, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 64, TopK: 6, Shared: 2, Groups: 1, TopKGroups: 1, RoutedScale: 1,
		MaxShardBytes: 256 << 20,
	}
}

// countingCPU is the CPU backend counting the arithmetic of the layer's
// matrix products (2·m·n·k each; attention's own products are left out).
type countingCPU struct {
	*backend.CPU
	flops int64
}

func (c *countingCPU) MatMul(dst, x backend.Mat, w backend.Weight) {
	c.flops += 2 * int64(x.Rows) * int64(w.Rows()) * int64(w.Cols())
	c.CPU.MatMul(dst, x, w)
}

// BenchmarkV2LiteLayer runs a V2-Lite-shaped MoE layer (1.2 GB of BF16
// weights, read from a checkpoint in the page cache) on 4 prompts of 32
// tokens and reports tokens per second, and the rate of its matrix
// products (weight reading included) against the register-only FMA peak
// measured in the same run. Writing the checkpoint takes a few seconds
// before the timer starts.
func BenchmarkV2LiteLayer(b *testing.B) {
	dir := b.TempDir()
	if err := synth.WriteMLA(v2LiteLayer(), dir); err != nil {
		b.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	m, err := Open(cat)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lens := []int{32, 32, 32, 32}
	ids := make([]int, 128)
	for i := range ids {
		ids[i] = rng.IntN(m.Config.Vocab)
	}
	h, err := m.EmbedRows(ids)
	if err != nil {
		b.Fatal(err)
	}
	cpu := &countingCPU{CPU: backend.NewCPU()}
	if _, err := m.Forward(context.Background(), cpu, 0, h, lens); err != nil { // page cache, warm-up
		b.Fatal(err)
	}
	peak := simd.PeakGFLOPS(runtime.GOMAXPROCS(0), 200*time.Millisecond)
	var load time.Duration
	var experts int
	cpu.flops = 0
	b.ResetTimer()
	for b.Loop() {
		out, err := m.Forward(context.Background(), cpu, 0, h, lens)
		if err != nil {
			b.Fatal(err)
		}
		load += out.LoadTime
		experts = out.ExpertsRun
	}
	b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tokens/s")
	gflops := float64(cpu.flops) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gflops, "matmul-GFLOP/s")
	b.ReportMetric(gflops/peak, "of-peak")
	b.ReportMetric(load.Seconds()*1000/float64(b.N), "load-ms/op")
	b.ReportMetric(float64(experts), "experts-run")
	b.ReportMetric(peak, "peak-GFLOP/s")
}

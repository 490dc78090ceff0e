package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/safetensors"
)

// largeSpecs approximates the DeepSeek-V4.1-Flash tensor list: 43 layers
// (3 dense, 40 MoE x 384 experts), Engram tables in layers 1 and 14, one
// MTP block with its own experts, embed/head/vision: about 96k tensors.
func largeSpecs() []safetensors.Spec {
	const hidden, inter, experts = 5120, 2304, 384
	var specs []safetensors.Spec
	add := func(name string, d safetensors.DType, shape ...int64) {
		specs = append(specs, safetensors.Spec{Name: name, DType: d, Shape: shape})
	}
	fp8 := func(name string, out, in int64) {
		add(name+".weight", e4m3, out, in)
		add(name+".scale", e8m0, (out+31)/32, (in+31)/32)
	}
	mxfp4 := func(name string, out, in int64) {
		add(name+".weight", i8, out, in/2)
		add(name+".scale", e8m0, out, in/32)
	}
	block := func(p string, moe bool) {
		for _, w := range []struct {
			name    string
			out, in int64
		}{{"wq_a", 1024, hidden}, {"wq_b", 8192, 1024}, {"wkv", 512, hidden}, {"wo_a", 8192, 4096}, {"wo_b", hidden, 8192}} {
			fp8(p+"attn."+w.name, w.out, w.in)
		}
		add(p+"attn.q_norm.weight", bf16, 1024)
		add(p+"attn.kv_norm.weight", bf16, 512)
		add(p+"attn.attn_sink", f32, 64)
		add(p+"attn_norm.weight", bf16, hidden)
		add(p+"ffn_norm.weight", bf16, hidden)
		for _, hc := range []string{"hc_attn", "hc_ffn"} {
			add(p+hc+"_fn", f32, 24, 4*hidden)
			add(p+hc+"_base", f32, 24)
			add(p+hc+"_scale", f32, 3)
		}
		if !moe {
			fp8(p+"ffn.w1", 4*inter, hidden)
			fp8(p+"ffn.w2", hidden, 4*inter)
			fp8(p+"ffn.w3", 4*inter, hidden)
			return
		}
		add(p+"ffn.gate.weight", bf16, experts, hidden)
		add(p+"ffn.gate.bias", f32, experts)
		add(p+"ffn.gate.bias_vl", f32, experts)
		fp8(p+"ffn.shared_experts.w1", inter, hidden)
		fp8(p+"ffn.shared_experts.w2", hidden, inter)
		fp8(p+"ffn.shared_experts.w3", inter, hidden)
		for e := range experts {
			mxfp4(fmt.Sprintf("%sffn.experts.%d.w1", p, e), inter, hidden)
			mxfp4(fmt.Sprintf("%sffn.experts.%d.w2", p, e), hidden, inter)
			mxfp4(fmt.Sprintf("%sffn.experts.%d.w3", p, e), inter, hidden)
		}
	}
	add("embed.weight", bf16, 129280, hidden)
	for l := range 43 {
		p := fmt.Sprintf("layers.%d.", l)
		block(p, l >= 3)
		if l == 1 || l == 14 {
			add(p+"engram.embed.weight", e4m3, 16_000_000, 256)
			add(p+"engram.embed.scale", e8m0, 16_000_000, 8)
			fp8(p+"engram.wkv", 512, hidden)
		}
	}
	block("mtp.0.", true)
	fp8("mtp.0.e_proj", hidden, hidden)
	fp8("mtp.0.h_proj", hidden, hidden)
	add("mtp.0.enorm.weight", bf16, hidden)
	add("mtp.0.hnorm.weight", bf16, hidden)
	add("norm.weight", bf16, hidden)
	add("head.weight", bf16, 129280, hidden)
	add("hc_head_fn", f32, 4, 4*hidden)
	for b := range 27 {
		add(fmt.Sprintf("vision.blocks.%d.attn.qkv.weight", b), bf16, 3456, 1152)
		add(fmt.Sprintf("vision.blocks.%d.mlp.fc1.weight", b), bf16, 4304, 1152)
	}
	return specs
}

// writeLarge writes largeSpecs as 48 sparse shards (headers only, data as
// holes) with config and index, and returns the tensor count.
func writeLarge(b *testing.B, dir string) int {
	specs := largeSpecs()
	const shards = 48
	weightMap := make(map[string]string, len(specs))
	per := (len(specs) + shards - 1) / shards
	for i := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards)
		part := specs[i*per : min((i+1)*per, len(specs))]
		for _, s := range part {
			weightMap[s.Name] = name
		}
		l, err := safetensors.NewLayout([]safetensors.Meta{{Key: "format", Value: "pt"}}, part)
		if err != nil {
			b.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, l.Header, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Truncate(p, l.Size); err != nil {
			b.Fatal(err)
		}
	}
	writeIndex(b, dir, weightMap)
	writeJSON(b, dir, ConfigName, map[string]any{"model_type": "deepseek_v41", "num_hidden_layers": 43,
		"quantization_config": map[string]any{"quant_method": "fp8", "weight_block_size": []int{32, 32}, "expert_dtype": "fp4"}})
	return len(specs)
}

// BenchmarkOpen opens a V4.1-sized catalog: 48 shards, ~96k tensors.
// retained-MB is the heap an open catalog holds.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	n := writeLarge(b, dir)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	c, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	if len(c.Problems) != 0 || len(c.Tensors) != n {
		b.Fatalf("%d problems (%v...), %d of %d tensors", len(c.Problems), c.Problems[:min(3, len(c.Problems))], len(c.Tensors), n)
	}
	c.Close()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	ops := 0
	for b.Loop() {
		c, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		ops++
	}
	// CPU time, all threads and the GC included, is the target ("well under
	// a second"); wall time varies with what else shares the machine.
	b.ReportMetric((cpuTime(b)-cpu0).Seconds()/float64(ops), "cpu-s/op")
	b.ReportMetric(float64(n), "tensors")
	b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/(1<<20), "retained-MB")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHostileHeader opens a checkpoint whose one shard's header holds
// 10^6 one-byte tensors (about 80 MB of JSON, under the reference reader's
// 100 MB): the shard is refused at MaxTensors with one problem.
// Before the bound a mount spent about a minute and 2.6 GB on it.
func BenchmarkHostileHeader(b *testing.B) {
	dir := b.TempDir()
	specs := make([]safetensors.Spec, 1_000_000)
	for i := range specs {
		specs[i] = safetensors.Spec{Name: fmt.Sprintf("layers.%d.ffn.experts.%d.w1.weight", i/1000, i%1000), DType: safetensors.U8, Shape: []int64{1}}
	}
	l, err := safetensors.NewLayout(nil, specs)
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(dir, singleName)
	if err := os.WriteFile(p, l.Header, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(p, l.Size); err != nil {
		b.Fatal(err)
	}
	writeJSON(b, dir, ConfigName, map[string]any{"model_type": "deepseek_v3"})
	specs, l = nil, nil
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	ops := 0
	for b.Loop() {
		c, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Shards) != 0 || len(c.Problems) != 1 || c.Problems[0].Reason != fmt.Sprintf("header holds more than %d tensors, the limit", MaxTensors) {
			b.Fatalf("shards %d, problems %v", len(c.Shards), c.Problems)
		}
		c.Close()
		ops++
	}
	b.ReportMetric((cpuTime(b)-cpu0).Seconds()/float64(ops), "cpu-s/op")
}

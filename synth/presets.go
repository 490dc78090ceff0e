package synth

import (
	"fmt"
	"slices"
)

// Preset is a named Spec.
type Preset struct {
	Name        string
	Description string // one line
	Spec        Spec
	// MLA, when set, makes this a DeepSeek-V2/V3 preset, which WriteMLA
	// writes; Spec is then unused.
	MLA *MLASpec
}

// Validate reports the first thing in the preset's spec that cannot be
// laid out.
func (p *Preset) Validate() error {
	if p.MLA != nil {
		return p.MLA.Validate()
	}
	return p.Spec.Validate()
}

// Presets lists the presets Write knows, in the order a help text shows them.
func Presets() []Preset {
	return []Preset{
		{"v41-tiny", "DeepSeek-V4.1 layout in 27 MB: 4 layers (1 dense), 8 MXFP4 experts, 2 Engram tables, MTP, 4 shards", TinySpec(), nil},
		{"v41-bench", "DeepSeek-V4.1 layout in 2.8 GiB of realistic values, 2 shards of over 1 GiB, for throughput benchmarks", benchSpec(), nil},
		{"v41-full-sparse", "the full DeepSeek-V4.1-Flash tensor list (48 shards, ~96k tensors, ~475 GiB) as sparse files of zeros", fullSparseSpec(), nil},
		{"v2lite-tiny", "DeepSeek-V2-Lite layout (MLA, softmax routing) in 2.6 MB with a tokenizer: 4 layers (1 dense), 8 experts, for trace/", Spec{}, ptr(V2LiteTinySpec())},
		{"v3-tiny", "DeepSeek-V3 layout (q LoRA, sigmoid + bias group routing) in 3.1 MB with a tokenizer: 4 layers (1 dense), 16 experts, for trace/", Spec{}, ptr(V3TinySpec())},
	}
}

// Write writes the named preset into dir (created if missing). Files of
// the same names are replaced; other files are left alone.
func Write(preset, dir string) error {
	i := slices.IndexFunc(Presets(), func(p Preset) bool { return p.Name == preset })
	if i < 0 {
		return fmt.Errorf("synth: unknown preset %q", preset)
	}
	if p := Presets()[i]; p.MLA != nil {
		return WriteMLA(*p.MLA, dir)
	}
	return WriteSpec(Presets()[i].Spec, dir)
}

func ptr[T any](v T) *T { return &v }

// v4CompressRatios returns V4-Flash's pattern for n layers: none in the
// first two, then alternating 4 (with indexer) and 128.
func v4CompressRatios(n int) []int {
	r := make([]int, n)
	for i := 2; i < n; i++ {
		r[i] = 4
		if i%2 == 1 {
			r[i] = 128
		}
	}
	return r
}

// TinySpec is the v41-tiny preset: every kind of tensor of the V4.1 layout,
// every matrix dimension a multiple of 256, 27 MB in 4 shards.
func TinySpec() Spec {
	return Spec{
		Seed:   1,
		Hidden: 512, Vocab: 1024,
		Layers: 4, DenseLayers: 1, DenseInter: 1024,
		Experts: 8, ActiveExperts: 2, MoEInter: 256, SharedInter: 256,
		QLoRA: 256, Heads: 4, HeadDim: 256, OGroups: 2, OLoRA: 256,
		IndexHeads: 4, IndexHeadDim: 64,
		CompressRatios: v4CompressRatios(4),
		HCMult:         4,
		EngramLayers:   []int{1, 3}, EngramRows: 4096,
		MTPLayers: 1, MTPExperts: 8,
		VisionLayers: 1, VisionDim: 256,
		MaxShardBytes: 7 << 20,
	}
}

// benchSpec is the v41-bench preset: V4-Flash-sized matrices (16 experts
// of 2048x4096 per MoE layer), two Engram tables of 528 MiB, in two shards
// of 1.5 and 1.3 GiB.
func benchSpec() Spec {
	return Spec{
		Seed:   2,
		Hidden: 4096, Vocab: 16384,
		Layers: 4, DenseLayers: 1, DenseInter: 4096,
		Experts: 16, ActiveExperts: 6, MoEInter: 2048, SharedInter: 2048,
		QLoRA: 1024, Heads: 64, HeadDim: 512, OGroups: 8, OLoRA: 1024,
		IndexHeads: 64, IndexHeadDim: 128,
		CompressRatios: v4CompressRatios(4),
		HCMult:         4,
		EngramLayers:   []int{1, 3}, EngramRows: 2 << 20,
		MTPLayers: 1, MTPExperts: 8,
		MaxShardBytes: 3 << 29, // 1.5 GiB
	}
}

// fullSparseSpec is the v41-full-sparse preset. The real tensor list is not
// public; this approximates it from the published figures (FORMATS.md):
// 43 layers of which the first 3 are dense and 40 are MoE with 384 experts
// of logical 2304x5120 / 5120x2304 (92,160 expert tensors, 268.9 GiB), two
// Engram tables of 384M rows in layers 1 and 14 (188.8 GiB), 3 MTP layers
// with 128 experts each (with their attention 7.2 GiB), FP8 attention,
// shared and dense FFNs, BF16 embed, head and a 24-block vision tower, and
// V4's compressors, indexers, norms, routers, sinks and hyper-connections.
// It comes to 96,416 tensors and 474.9 GiB in 48 shards.
func fullSparseSpec() Spec {
	return Spec{
		Seed:   3,
		Hidden: 5120, Vocab: 129280,
		Layers: 43, DenseLayers: 3, DenseInter: 6144,
		Experts: 384, ActiveExperts: 6, MoEInter: 2304, SharedInter: 2304,
		QLoRA: 1024, Heads: 32, HeadDim: 512, OGroups: 8, OLoRA: 1024,
		IndexHeads: 64, IndexHeadDim: 128,
		CompressRatios: v4CompressRatios(43),
		HCMult:         4,
		EngramLayers:   []int{1, 14}, EngramRows: 384_000_000,
		MTPLayers: 3, MTPExperts: 128,
		VisionLayers: 24, VisionDim: 1536,
		MaxShardBytes: 13 << 29, // 6.5 GiB
		Sparse:        true,
	}
}

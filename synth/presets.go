package synth

import (
	"fmt"
	"slices"
)

// Preset is a named Spec.
type Preset struct {
	Name string
	// Description says what the checkpoint is, in one line; what it
	// holds in numbers (shards, tensors, bytes) is Contents'.
	Description string
	// Purpose says what the preset is for, in one line: the help of dsfs
	// synth shows it beside the description.
	Purpose string
	Spec    Spec
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

// Family names the model family a checkpoint's config.json declares.
type Family string

// The families of the presets.
const (
	FamilyV41 Family = "DeepSeek-V4.1"
	FamilyV4  Family = "DeepSeek-V4"
	FamilyV3  Family = "DeepSeek-V3"
	FamilyV2  Family = "DeepSeek-V2"
)

// Contents is what Write writes for a preset, computed from its spec by
// the code that writes it, so that a help text stating it cannot drift
// from the files.
type Contents struct {
	Family  Family
	Shards  int   // safetensors files
	Tensors int   // tensors over all shards
	Bytes   int64 // tensor data over all shards, headers left out
	// Tokenizer says a tokenizer.json is written (trace/ encodes its text
	// prompts with it, gguf/ carries it).
	Tokenizer bool
}

// Contents computes what Write writes for p, without writing.
func (p *Preset) Contents() (Contents, error) {
	if err := p.Validate(); err != nil {
		return Contents{}, err
	}
	if s := p.MLA; s != nil {
		c := Contents{Family: FamilyV2, Tokenizer: s.Vocab >= tokenizerBase}
		if s.V3 {
			c.Family = FamilyV3
		}
		shards := s.shards()
		c.Shards = len(shards)
		for _, sh := range shards {
			for _, t := range sh {
				c.Tensors++
				c.Bytes += t.bytes()
			}
		}
		return c, nil
	}
	s := p.Spec
	c := Contents{Family: FamilyV41, Tokenizer: true}
	if s.Arch == ArchV4 {
		c.Family = FamilyV4
	}
	shards, err := planShards(newLayout(&s), s.MaxShardBytes)
	if err != nil {
		return Contents{}, err
	}
	c.Shards = len(shards)
	for _, sh := range shards {
		for _, u := range sh.units {
			c.Tensors += len(u.tensors)
			c.Bytes += u.bytes()
		}
	}
	return c, nil
}

// Presets lists the presets Write knows, in the order a help text shows them.
func Presets() []Preset {
	return []Preset{
		{"v41-tiny", "DeepSeek-V4.1-Flash's every tensor pattern at small sizes in the release's shard assignment: 6 layers (every CSA2 role, 2 Engram blocks), 8 MXFP4 experts, 3 DSpark stages, vision",
			"the default of dsfs demo and of the tests: every view of the mission's family in seconds", TinySpec(), nil},
		{"v41-bench", "DeepSeek-V4.1-Flash layout with V4-Flash-sized experts, realistic values, cut into shards of over 1 GiB",
			"throughput benchmarks of the transcoding views (bench/)", benchSpec(), nil},
		{"v41-full-sparse", "DeepSeek-V4.1-Flash as released: every header, the index and both config files byte for byte, the data as holes",
			"the released layout: mount time, memory and headers at full scale, without the download", V41FlashSpec(), nil},
		{"v4-tiny", "DeepSeek-V4-Flash's every tensor pattern at small sizes in the release's shard assignment: 4 layers (hash, SWA, CSA, HCA), 8 MXFP4 experts, mtp.0, hc head",
			"the V4 family's views in seconds", V4TinySpec(), nil},
		{"v4-full-sparse", "DeepSeek-V4-Flash as released: every header, the index and both config files byte for byte, the data as holes",
			"the released layout: mount time, memory and headers at full scale, without the download", V4FlashSpec(), nil},
		{"v4-bench", "DeepSeek-V4-Flash layout with every dimension a multiple of 256 and realistic values",
			"load benchmarks of gguf/ and q2/", v4BenchSpec(), nil},
		{"v2lite-tiny", "DeepSeek-V2-Lite layout (MLA, softmax routing) at small sizes: 4 layers (1 dense), 8 experts",
			"trace/ and gguf/ of the V2 family: the shapes of the golden vectors in testdata/trace", Spec{}, ptr(V2LiteTinySpec())},
		{"v3-tiny", "DeepSeek-V3 layout (q LoRA, sigmoid + bias group routing) at small sizes: 4 layers (1 dense), 16 experts",
			"trace/ and gguf/ of the V3 family, its group-limited routing", Spec{}, ptr(V3TinySpec())},
		{"v3-bench", "DeepSeek-V3 layout (BF16): 4 layers (1 dense), 8 experts of 1024x2048",
			"load benchmarks of gguf/", Spec{}, ptr(v3BenchSpec())},
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

// V41FlashSpec is DeepSeek-V4.1-Flash as released (LAYOUTS.md): 40 layers
// of 384 experts, CSA2 sources on layers 2, 8, 14, 20 (KV) and those with
// 24, 28, 32, 36 (index), Engram on layers 1 and 14, 3 DSpark stages of
// 128 experts, a 32-block vision tower; 48 shards, 96,085 tensors,
// 510,286,023,000 bytes of data.
func V41FlashSpec() Spec {
	ratios := make([]int, 40)
	for i := 2; i < 40; i++ {
		ratios[i] = 2
		if i >= 20 {
			ratios[i] = 1
		}
	}
	return Spec{
		Seed: 3, Arch: ArchV41,
		Hidden: 5120, Vocab: 129280, Layers: 40,
		Experts: 384, ActiveExperts: 6, MoEInter: 2304, SharedInter: 2304,
		QLoRA: 1280, Heads: 64, HeadDim: 512, OGroups: 8, OLoRA: 1024,
		IndexHeads: 32, IndexHeadDim: 128,
		CompressRatios:    ratios,
		KVSourceLayers:    []int{2, 8, 14, 20},
		IndexSourceLayers: []int{2, 8, 14, 20, 24, 28, 32, 36},
		HCMult:            4,
		EngramLayers:      []int{1, 14}, EngramRowsByLayer: []int64{384006168, 384016682}, EngramHeads: 8,
		MTPLayers: 3, MTPExperts: 128, DSparkTargets: []int{37, 38, 39}, MarkovRank: 256,
		VisionLayers: 32, VisionDim: 1024, VisionInter: 2816, VisionHeads: 16,
		Sparse: true, TokenizerFill: releasedTokenizerFill,
	}
}

// V4FlashSpec is DeepSeek-V4-Flash as released (LAYOUTS.md §13): 43
// layers of 256 experts, the first 3 hash-routed, compress ratios 4 and
// 128 alternating from layer 2, 128x128 FP8 blocks, one MTP block; 46
// shards, 69,187 tensors, 159,609,485,896 bytes of data.
func V4FlashSpec() Spec {
	return Spec{
		Seed: 4, Arch: ArchV4,
		Hidden: 4096, Vocab: 129280, Layers: 43,
		Experts: 256, ActiveExperts: 6, MoEInter: 2048, SharedInter: 2048,
		QLoRA: 1024, Heads: 64, HeadDim: 512, OGroups: 8, OLoRA: 1024,
		IndexHeads: 64, IndexHeadDim: 128,
		CompressRatios: v4CompressRatios(43),
		HCMult:         4, FP8Block: 128, HashLayers: 3,
		MTPLayers: 1, MTPExperts: 256,
		Sparse: true, TokenizerFill: releasedTokenizerFill,
	}
}

// releasedTokenizerFill is the filler-word count that gives the released
// checkpoints' synthetic tokenizer.json its 129,280 ids with exactly
// engram_compressed_vocab_size (99,092) distinct Engram keys: the 1,259
// learned tokens normalise to 1,080 keys, each filler word adds one and
// each of the 30,009 spaced copies none.
const releasedTokenizerFill = 98012

// TinySpec is the v41-tiny preset: every tensor pattern of
// DeepSeek-V4.1-Flash at small sizes, every matrix dimension a multiple of
// 256, in the release's shard assignment. Layers 0 and 1 are sliding-window
// only, 2 a ratio-2 CSA2 source (compressor with gate, indexer), 3 reuses
// it, 4 a ratio-1 source (no gate), 5 an index source; Engram on 1 and 3,
// hashed at a scale trace/ runs (an n-gram space of 1,300 per head, the
// tokenizer's 867 keys); a tokenizer.json of 1,024 ids.
func TinySpec() Spec {
	return Spec{
		Seed: 1, Arch: ArchV41,
		Hidden: 512, Vocab: 1024, Layers: 6,
		Experts: 8, ActiveExperts: 2, MoEInter: 256, SharedInter: 256,
		QLoRA: 256, Heads: 4, HeadDim: 256, OGroups: 2, OLoRA: 256,
		IndexHeads: 4, IndexHeadDim: 128,
		CompressRatios:    []int{0, 0, 2, 2, 1, 1},
		KVSourceLayers:    []int{2, 4},
		IndexSourceLayers: []int{2, 4, 5},
		HCMult:            4,
		EngramLayers:      []int{1, 3}, EngramHeads: 1,
		EngramVocab: 1300, EngramRowsByLayer: []int64{3911, 3967}, EngramKeys: 867,
		MTPLayers: 3, MTPExperts: 8, DSparkTargets: []int{3, 4, 5}, MarkovRank: 64,
		VisionLayers: 1, VisionDim: 256, VisionInter: 512, VisionHeads: 4,
	}
}

// V4TinySpec is the v4-tiny preset: every tensor pattern of
// DeepSeek-V4-Flash at small sizes: layers 0 and 1 hash-routed and
// sliding-window only, 2 CSA (ratio 4, indexer), 3 HCA (ratio 128), the
// head hyper-connection and mtp.0, 128x128 FP8 blocks; a tokenizer.json
// of 1,024 ids.
func V4TinySpec() Spec {
	return Spec{
		Seed: 5, Arch: ArchV4,
		Hidden: 512, Vocab: 1024, Layers: 4,
		Experts: 8, ActiveExperts: 2, MoEInter: 256, SharedInter: 256,
		QLoRA: 256, Heads: 4, HeadDim: 256, OGroups: 2, OLoRA: 256,
		IndexHeads: 4, IndexHeadDim: 128,
		CompressRatios: v4CompressRatios(4),
		HCMult:         4, FP8Block: 128, HashLayers: 2,
		MTPLayers: 1, MTPExperts: 8,
	}
}

// benchSpec is the v41-bench preset: the V4.1 layout with V4-Flash-sized
// matrices (16 experts of 2048x4096 per layer; layer 2 a ratio-2 CSA2
// source, layer 3 reading its KV with an indexer of its own) and two
// Engram tables of 529 MiB (8 heads over an n-gram space of 87,381, the
// 9,080 keys of its tokenizer.json of 16,384 ids), cut by size into two
// shards of over 1 GiB for throughput benchmarks.
func benchSpec() Spec {
	return Spec{
		Seed: 2, Arch: ArchV41,
		Hidden: 4096, Vocab: 16384, Layers: 4,
		Experts: 16, ActiveExperts: 6, MoEInter: 2048, SharedInter: 2048,
		QLoRA: 1024, Heads: 64, HeadDim: 512, OGroups: 8, OLoRA: 1024,
		IndexHeads: 32, IndexHeadDim: 128,
		CompressRatios:    []int{0, 0, 2, 2},
		KVSourceLayers:    []int{2},
		IndexSourceLayers: []int{2, 3},
		HCMult:            4,
		EngramLayers:      []int{1, 3}, EngramHeads: 8,
		EngramVocab: 87381, EngramRowsByLayer: []int64{2100090, 2105268}, EngramKeys: 9080,
		MTPLayers: 1, MTPExperts: 8, DSparkTargets: []int{1, 2, 3}, MarkovRank: 256,
		MaxShardBytes: 7 << 28, // 1.75 GiB
		TokenizerFill: 8000,
	}
}

// v4BenchSpec is the v4-bench preset: the V4-Flash layout with every
// matrix dimension a multiple of 256 (q2/ quantises its experts) and
// 16 experts of 1024x2048 per layer, big enough that reading a view
// costs seconds, and a tokenizer.json of its vocabulary (gguf/ needs one).
func v4BenchSpec() Spec {
	return Spec{
		Seed: 6, Arch: ArchV4,
		Hidden: 2048, Vocab: 16384, Layers: 4,
		Experts: 16, ActiveExperts: 6, MoEInter: 1024, SharedInter: 1024,
		QLoRA: 512, Heads: 16, HeadDim: 512, OGroups: 4, OLoRA: 512,
		IndexHeads: 16, IndexHeadDim: 128,
		CompressRatios: v4CompressRatios(4),
		HCMult:         4, FP8Block: 128, HashLayers: 2,
		MTPLayers: 1, MTPExperts: 8,
		TokenizerFill: 8000,
	}
}

// v3BenchSpec is the v3-bench preset: DeepSeek-V3's layout and routing
// with 8 experts of 1024x2048 (whole 256-blocks) in each of 3 MoE layers.
func v3BenchSpec() MLASpec {
	return MLASpec{
		Seed: 7, V3: true, Hidden: 2048, Vocab: 1024, Layers: 4, DenseLayers: 1, Inter: 4096, MoEInter: 1024,
		Heads: 16, QLoRA: 512, KVLoRA: 256, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 8, TopK: 4, Shared: 1, Groups: 4, TopKGroups: 2, RoutedScale: 2.5,
		MaxShardBytes: 256 << 20,
	}
}

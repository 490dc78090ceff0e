package synth

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/dsfs/dsfs/safetensors"
)

// Arch is the checkpoint layout a Spec follows.
type Arch int

const (
	// ArchV41 is DeepSeek-V4.1-Flash as released (LAYOUTS.md §3-§9): CSA2
	// attention (compressors on the KV source layers, indexers on the
	// index source layers), routers with a vision-token bias (bias_vl),
	// Engram blocks, DSpark draft stages (mtp.M) with their heads, a vision
	// tower with its aligner and the image-span delimiters; config.json
	// nests the language settings under text_config, and
	// inference/config.json carries DeepSeek's own keys.
	ArchV41 Arch = iota
	// ArchV4 is DeepSeek-V4-Flash (LAYOUTS.md §13): compressors and
	// indexers on every layer with a compress ratio (4: overlapping with
	// an indexer, else plain), hash-routed first layers (ffn.gate.tid2eid),
	// head hyper-connections (hc_head_*) and one MTP block with e_proj and
	// h_proj; config.json is flat.
	ArchV4
)

// Spec describes a synthetic DeepSeek-V4.1 or V4 checkpoint in the official
// "flat" naming. Start from a preset's spec (TinySpec, Presets) and change
// what a test needs; Validate says what does not fit.
//
// Every block (layers.L., mtp.M.) holds:
//
//	hc_{attn,ffn}_{fn,base,scale}                  F32 hyper-connections
//	attn_norm.weight, ffn_norm.weight              BF16 norms
//	attn.{wq_a,wq_b,wkv,wo_a,wo_b}                 FP8 E4M3 + E8M0 FP8Block^2 scales
//	attn.{q_norm,kv_norm}.weight, attn.attn_sink   BF16, F32 [Heads]
//	attn.compressor.*, attn.indexer.*              by Arch (see ArchV41, ArchV4)
//	ffn.w{1,2,3}                                   FP8 dense FFN, L < DenseLayers
//	ffn.gate.weight + bias (+ bias_vl, or tid2eid) BF16 / F32 / I64 router
//	ffn.experts.E.w{1,2,3}                         MXFP4: I8 [out, in/2] + E8M0 [out, in/32]
//	ffn.shared_experts.w{1,2,3}                    FP8
//
// and around them embed.weight, head.weight, norm.weight; Engram blocks
// (layers.L.engram.*), the vision tower, aligner and image_* (ArchV41);
// hc_head_* (ArchV4); and the MTP or DSpark stages' extras.
//
// Every FP8 weight has a ".scale" of shape [ceil(O/B), ceil(I/B)] and every
// MXFP4 weight one of shape [O, I/32], in the same shard. Routed expert
// widths should be multiples of 256 (q2/ keeps other experts native).
type Spec struct {
	// Seed is mixed into every tensor's PRNG seed: two specs that differ
	// only in Seed have different values and the same layout.
	Seed uint64
	Arch Arch

	Hidden        int // model width (dim, hidden_size)
	Vocab         int
	Layers        int // main layers
	DenseLayers   int // the first DenseLayers layers have a dense FFN, the rest routed experts
	DenseInter    int // width of the dense FFN
	Experts       int // routed experts per MoE layer
	ActiveExperts int // experts per token (config.json only)
	MoEInter      int // routed expert width
	SharedInter   int // width of the one shared expert; 0 for none

	// Attention: wq_a [QLoRA, Hidden], wq_b [Heads*HeadDim, QLoRA], wkv
	// [HeadDim, Hidden], wo_a [OGroups*OLoRA, Heads*HeadDim/OGroups], wo_b
	// [Hidden, OGroups*OLoRA].
	QLoRA, Heads, HeadDim, OGroups, OLoRA int
	// IndexHeads and IndexHeadDim size the indexers.
	IndexHeads, IndexHeadDim int
	// CompressRatios gives each main layer's KV compression ratio
	// (compress_ratios). ArchV4: 0 none, 4 an overlapping compressor with
	// an indexer, any other a plain compressor. ArchV41: the ratio of a
	// KV source layer's compressor (1 has no gate: no group to pool). Nil
	// means 0 everywhere.
	CompressRatios []int
	// KVSourceLayers (ArchV41) own a compressor and the indexer's keys
	// (indexer.wk, k_norm); IndexSourceLayers own the indexer's queries
	// (indexer.wq_b, weights_proj). The other layers reuse their results.
	KVSourceLayers, IndexSourceLayers []int
	// HCMult is the number of hyper-connection streams.
	HCMult int
	// FP8Block is the FP8 weight block edge (32 for V4.1, 128 for V4); 0
	// means 32.
	FP8Block int

	// HashLayers (ArchV4) route by token id: the first HashLayers layers
	// have ffn.gate.tid2eid [Vocab, ActiveExperts] of HashIDType (I64 when
	// empty, as released) instead of ffn.gate.bias.
	HashLayers int
	HashIDType safetensors.DType

	// EngramLayers lists the layers with an Engram block; table i has
	// EngramRowsByLayer[i] rows, or EngramRows when that is nil.
	// EngramHeads sizes the block's projection (ArchV41: engram.wkv
	// [Hidden*(HCMult+1), 3*EngramHeads*256]).
	EngramLayers      []int
	EngramRows        int64
	EngramRowsByLayer []int64
	EngramHeads       int

	MTPLayers  int // MTP (ArchV4) or DSpark (ArchV41) stages
	MTPExperts int // routed experts per stage
	// DSparkTargets (ArchV41) are the target layers whose inputs
	// mtp.0.main_proj [Hidden, len*Hidden] projects; MarkovRank is the rank
	// of the last stage's Markov head.
	DSparkTargets []int
	MarkovRank    int

	// VisionLayers, VisionDim, VisionInter and VisionHeads size the vision
	// tower (ArchV41); 0 layers for none, and then no aligner or image_*.
	VisionLayers, VisionDim, VisionInter, VisionHeads int

	// MaxShardBytes is the shard size limit, as save_pretrained's
	// max_shard_size: a shard is closed before a tensor would take it past
	// the limit, and a tensor larger than the limit gets a shard of its own.
	// A weight and its scale are never split. 0 assigns shards as DeepSeek's
	// releases do (LAYOUTS.md §9, §13.3): one per layer, per MTP stage and
	// per Engram table, with the rest grouped around them.
	MaxShardBytes int64

	// Sparse writes real headers and leaves the data as holes, which read
	// as zeros: the full tensor list of a huge checkpoint in seconds and
	// almost no disk.
	Sparse bool

	// EngramVocab is engram_vocab_size: each Engram head hashes an n-gram
	// order into a table part whose size is the next unused prime above it
	// (engram.py), so a table's rows must be the sum of its layer's primes
	// for trace/ to run it; 0 means the release's 16,000,000.
	// EngramKeys is engram_compressed_vocab_size, the number of distinct
	// Engram keys of the tokenizer's ids (their normalised texts), which
	// Engram hashes in place of token ids; 0 means the release's 99,092.
	// TestPresetsRunEngram checks both against trace/v4 for every preset.
	EngramVocab, EngramKeys int

	// TokenizerFill shapes the tokenizer.json of Vocab ids written beside
	// every checkpoint (tokenizer.SynthesizeVocab): up to tokenizerMerges
	// merges learned from its sample, then TokenizerFill filler words and
	// spaced copies of them for the rest. 0 suits a vocabulary the
	// sample's merges fill (at most 1,371 ids); ids 0, 1 and 2 are BOS,
	// EOS and the pad token, as config.json's token ids say.
	TokenizerFill int
}

// engramDim is the width of an Engram table row (FORMATS.md), and
// engramOrders the n-gram orders each Engram head projects (max n-gram 4).
const (
	engramDim    = 256
	engramOrders = 3
)

// visionPatch is the input width of a vision patch: RGB 14x14.
const visionPatch = 3 * 14 * 14

// visionMerge is the number of patches the aligner merges into one token (3x3).
const visionMerge = 9

// Validate reports the first thing in s that cannot be laid out.
func (s *Spec) Validate() error {
	pos := []struct {
		name string
		v    int
	}{{"Hidden", s.Hidden}, {"Vocab", s.Vocab}, {"Layers", s.Layers}, {"QLoRA", s.QLoRA},
		{"Heads", s.Heads}, {"HeadDim", s.HeadDim}, {"OGroups", s.OGroups}, {"OLoRA", s.OLoRA},
		{"HCMult", s.HCMult}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("synth: %s must be positive, not %d", p.name, p.v)
		}
	}
	switch {
	case s.Arch != ArchV41 && s.Arch != ArchV4:
		return fmt.Errorf("synth: unknown Arch %d", s.Arch)
	case s.Hidden%32 != 0:
		return fmt.Errorf("synth: Hidden %d is not a multiple of 32 (MXFP4 blocks)", s.Hidden)
	case s.DenseLayers < 0 || s.DenseLayers > s.Layers:
		return fmt.Errorf("synth: DenseLayers %d outside [0, %d]", s.DenseLayers, s.Layers)
	case s.DenseLayers > 0 && s.DenseInter <= 0:
		return errors.New("synth: dense layers need a positive DenseInter")
	case s.DenseLayers < s.Layers && (s.Experts <= 0 || s.MoEInter <= 0):
		return errors.New("synth: MoE layers need positive Experts and MoEInter")
	case s.MoEInter%32 != 0:
		return fmt.Errorf("synth: MoEInter %d is not a multiple of 32 (MXFP4 blocks)", s.MoEInter)
	case s.SharedInter < 0:
		return fmt.Errorf("synth: negative SharedInter %d", s.SharedInter)
	case s.Heads*s.HeadDim%s.OGroups != 0:
		return fmt.Errorf("synth: Heads*HeadDim %d not divisible by OGroups %d", s.Heads*s.HeadDim, s.OGroups)
	case s.CompressRatios != nil && len(s.CompressRatios) != s.Layers:
		return fmt.Errorf("synth: %d CompressRatios for %d layers", len(s.CompressRatios), s.Layers)
	case s.MTPLayers < 0 || s.MTPLayers > 0 && (s.MTPExperts <= 0 || s.MoEInter <= 0):
		return errors.New("synth: MTP layers need positive MTPExperts and MoEInter")
	case s.VisionLayers < 0 || s.VisionLayers > 0 && (s.VisionDim <= 0 || s.VisionInter <= 0):
		return errors.New("synth: a vision tower needs a positive VisionDim and VisionInter")
	case s.MaxShardBytes < 0:
		return errors.New("synth: negative MaxShardBytes")
	case s.FP8Block < 0:
		return errors.New("synth: negative FP8Block")
	case s.HashLayers < 0 || s.HashLayers > s.Layers-s.DenseLayers:
		return fmt.Errorf("synth: HashLayers %d outside [0, %d]", s.HashLayers, s.Layers-s.DenseLayers)
	case s.HashLayers > 0 && (s.ActiveExperts <= 0 || s.ActiveExperts > s.Experts):
		return fmt.Errorf("synth: hash layers route each token to ActiveExperts %d distinct experts of %d", s.ActiveExperts, s.Experts)
	case s.HashIDType != "" && s.HashIDType != safetensors.I64 && s.HashIDType != safetensors.I32:
		return fmt.Errorf("synth: HashIDType %s is neither I64 nor I32", s.HashIDType)
	case s.EngramRowsByLayer != nil && len(s.EngramRowsByLayer) != len(s.EngramLayers):
		return fmt.Errorf("synth: %d EngramRowsByLayer for %d Engram layers", len(s.EngramRowsByLayer), len(s.EngramLayers))
	case s.Arch == ArchV41 && len(s.EngramLayers) > 0 && s.EngramHeads <= 0:
		return errors.New("synth: V4.1 Engram blocks need positive EngramHeads")
	case s.EngramVocab < 0 || s.EngramKeys < 0:
		return errors.New("synth: negative EngramVocab or EngramKeys")
	case s.TokenizerFill < 0 || s.Vocab < tokenizerBase+s.TokenizerFill:
		return fmt.Errorf("synth: Vocab %d does not hold the tokenizer's %d byte and special tokens and %d filler words", s.Vocab, tokenizerBase, s.TokenizerFill)
	case s.Arch == ArchV41 && s.MTPLayers > 0 && (len(s.DSparkTargets) == 0 || s.MarkovRank <= 0):
		return errors.New("synth: DSpark stages need DSparkTargets and a positive MarkovRank")
	}
	for _, r := range s.CompressRatios {
		if r < 0 {
			return fmt.Errorf("synth: negative compress ratio %d", r)
		}
		if s.Arch == ArchV4 && r == 4 && (s.IndexHeads <= 0 || s.IndexHeadDim <= 0) {
			return errors.New("synth: ratio-4 layers need positive IndexHeads and IndexHeadDim")
		}
	}
	for _, ls := range [][]int{s.KVSourceLayers, s.IndexSourceLayers, s.DSparkTargets} {
		for _, l := range ls {
			if l < 0 || l >= s.Layers {
				return fmt.Errorf("synth: source or target layer %d out of range", l)
			}
		}
	}
	if s.Arch == ArchV41 && len(s.KVSourceLayers)+len(s.IndexSourceLayers) > 0 && (s.IndexHeads <= 0 || s.IndexHeadDim <= 0) {
		return errors.New("synth: CSA2 source layers need positive IndexHeads and IndexHeadDim")
	}
	seen := make(map[int]bool)
	for i, l := range s.EngramLayers {
		if l < 0 || l >= s.Layers || seen[l] {
			return fmt.Errorf("synth: Engram layer %d is out of range or repeated", l)
		}
		seen[l] = true
		if s.engramRows(i) <= 0 {
			return errors.New("synth: Engram tables need positive rows")
		}
	}
	return nil
}

// engramRows is the row count of the i-th Engram table.
func (s *Spec) engramRows(i int) int64 {
	if s.EngramRowsByLayer != nil {
		return s.EngramRowsByLayer[i]
	}
	return s.EngramRows
}

// fp8Block is the FP8 block edge.
func (s *Spec) fp8Block() int {
	if s.FP8Block == 0 {
		return 32
	}
	return s.FP8Block
}

// ratio is layer i's compress ratio.
func (s *Spec) ratio(i int) int {
	if s.CompressRatios == nil {
		return 0
	}
	return s.CompressRatios[i]
}

// kind says how a unit's values are generated.
type kind int

const (
	kindMXFP4  kind = iota // I8 packed E2M1 + E8M0 [out, in/32]
	kindFP8                // F8_E4M3 + E8M0 [ceil(out/B), ceil(in/B)]
	kindEngram             // F8_E4M3 [rows, 256] + E8M0 [rows, 8]
	kindBF16               // BF16 weights ~N(0, 0.02)
	kindNormal             // BF16 or F32 mean + sd*N(0, 1), for small tensors
	kindHash               // I64 or I32 expert ids in [0, experts)
)

// A unit is a weight with its scale (or a lone tensor): the tensors
// generated together and never split across shards.
type unit struct {
	kind     kind
	tensors  []safetensors.Spec // the weight first, then its scale
	mean, sd float64            // kindNormal; kindHash: sd is the expert count
	// group names the tensors sharing a scale centre (an expert), for
	// kindMXFP4.
	group string
	// shard is the release shard the unit belongs to (MaxShardBytes 0);
	// shards are numbered in file order, empty ones dropped.
	shard int
	block int // kindFP8: the block edge
}

// bytes is the data size of the unit.
func (u *unit) bytes() int64 {
	var n int64
	for _, t := range u.tensors {
		b, _ := safetensors.ByteLen(t.DType, t.Shape) // shapes come from a validated Spec
		n += b
	}
	return n
}

// layout lists the units of s in shard-filling order.
type layout struct {
	s     *Spec
	units []unit
	shard int // the release shard of units being added
}

func shape(dims ...int) []int64 {
	out := make([]int64, len(dims))
	for i, d := range dims {
		out[i] = int64(d)
	}
	return out
}

func ceilDiv(n, d int) int { return (n + d - 1) / d }

func (l *layout) add(u unit) {
	u.shard = l.shard
	l.units = append(l.units, u)
}

// fp8 adds base.weight [out, in] F8_E4M3 with base.scale E8M0 in blocks.
func (l *layout) fp8(base string, out, in int) {
	b := l.s.fp8Block()
	l.add(unit{kind: kindFP8, block: b, tensors: []safetensors.Spec{
		{Name: base + ".weight", DType: safetensors.F8E4M3, Shape: shape(out, in)},
		{Name: base + ".scale", DType: safetensors.F8E8M0, Shape: shape(ceilDiv(out, b), ceilDiv(in, b))},
	}})
}

// mxfp4 adds base.weight (out x in FP4 packed as I8) with its E8M0 scale.
func (l *layout) mxfp4(group, base string, out, in int) {
	l.add(unit{kind: kindMXFP4, group: group, tensors: []safetensors.Spec{
		{Name: base + ".weight", DType: safetensors.I8, Shape: shape(out, in/2)},
		{Name: base + ".scale", DType: safetensors.F8E8M0, Shape: shape(out, in/32)},
	}})
}

func (l *layout) bf16(name string, dims ...int) {
	l.add(unit{kind: kindBF16, tensors: []safetensors.Spec{{Name: name, DType: safetensors.BF16, Shape: shape(dims...)}}})
}

func (l *layout) normal(name string, dt safetensors.DType, mean, sd float64, dims ...int) {
	l.add(unit{kind: kindNormal, mean: mean, sd: sd,
		tensors: []safetensors.Spec{{Name: name, DType: dt, Shape: shape(dims...)}}})
}

// norm adds an RMSNorm weight: BF16 near 1.
func (l *layout) norm(name string, n int) { l.normal(name, safetensors.BF16, 1, 0.05, n) }

// bias adds a BF16 bias near 0.
func (l *layout) bias(name string, n int) { l.normal(name, safetensors.BF16, 0, 0.02, n) }

// hc adds a hyper-connection triple (fn [mix, HCMult*Hidden], base [mix],
// scale [3] with mix = (2+HCMult)*HCMult).
func (l *layout) hc(prefix, which string) {
	m := l.s.HCMult
	mix := (2 + m) * m
	l.normal(prefix+"hc_"+which+"_fn", safetensors.F32, 0, 0.01, mix, m*l.s.Hidden)
	l.normal(prefix+"hc_"+which+"_base", safetensors.F32, 0, 0.1, mix)
	l.normal(prefix+"hc_"+which+"_scale", safetensors.F32, 0.1, 0.02, 3)
}

// hcHead adds the head hyper-connection (fn [HCMult, HCMult*Hidden]).
func (l *layout) hcHead(prefix string) {
	m := l.s.HCMult
	l.normal(prefix+"hc_head_fn", safetensors.F32, 0, 0.01, m, m*l.s.Hidden)
	l.normal(prefix+"hc_head_base", safetensors.F32, 0, 0.1, m)
	l.normal(prefix+"hc_head_scale", safetensors.F32, 0.1, 0.02, 1)
}

// attentionCore adds what every block's attention holds.
func (l *layout) attentionCore(p string) {
	s := l.s
	l.fp8(p+"attn.wq_a", s.QLoRA, s.Hidden)
	l.norm(p+"attn.q_norm.weight", s.QLoRA)
	l.fp8(p+"attn.wq_b", s.Heads*s.HeadDim, s.QLoRA)
	l.fp8(p+"attn.wkv", s.HeadDim, s.Hidden)
	l.norm(p+"attn.kv_norm.weight", s.HeadDim)
	l.fp8(p+"attn.wo_a", s.OGroups*s.OLoRA, s.Heads*s.HeadDim/s.OGroups)
	l.fp8(p+"attn.wo_b", s.Hidden, s.OGroups*s.OLoRA)
	l.normal(p+"attn.attn_sink", safetensors.F32, 0, 1, s.Heads)
}

// attentionV4 adds V4-Flash's compressor and indexer for a layer of the
// given ratio.
func (l *layout) attentionV4(p string, ratio int) {
	s := l.s
	if ratio == 0 {
		return
	}
	// Ratio 4 compresses overlapping windows (twice the width) and adds
	// the sparse-attention indexer.
	w := s.HeadDim
	if ratio == 4 {
		w *= 2
	}
	l.normal(p+"attn.compressor.ape", safetensors.F32, 0, 0.02, ratio, w)
	l.bf16(p+"attn.compressor.wgate.weight", w, s.Hidden)
	l.bf16(p+"attn.compressor.wkv.weight", w, s.Hidden)
	l.norm(p+"attn.compressor.norm.weight", s.HeadDim)
	if ratio != 4 {
		return
	}
	l.normal(p+"attn.indexer.compressor.ape", safetensors.F32, 0, 0.02, ratio, 2*s.IndexHeadDim)
	l.bf16(p+"attn.indexer.compressor.wgate.weight", 2*s.IndexHeadDim, s.Hidden)
	l.bf16(p+"attn.indexer.compressor.wkv.weight", 2*s.IndexHeadDim, s.Hidden)
	l.norm(p+"attn.indexer.compressor.norm.weight", s.IndexHeadDim)
	l.bf16(p+"attn.indexer.weights_proj.weight", s.IndexHeads, s.Hidden)
	l.fp8(p+"attn.indexer.wq_b", s.IndexHeads*s.IndexHeadDim, s.QLoRA)
}

// attentionV41 adds V4.1's CSA2 tensors of main layer i: a KV source owns
// the compressor (its gate only when the ratio pools a group) and the
// indexer's keys, an index source the indexer's queries.
func (l *layout) attentionV41(p string, i int) {
	s := l.s
	if slices.Contains(s.KVSourceLayers, i) {
		l.norm(p+"attn.compressor.norm.weight", s.HeadDim)
		l.bf16(p+"attn.compressor.wkv.weight", s.HeadDim, s.Hidden)
		if s.ratio(i) > 1 {
			l.bf16(p+"attn.compressor.wgate.weight", s.HeadDim, s.Hidden)
		}
		l.bf16(p+"attn.indexer.wk.weight", s.IndexHeadDim, s.HeadDim)
		l.norm(p+"attn.indexer.k_norm.weight", s.IndexHeadDim)
	}
	if slices.Contains(s.IndexSourceLayers, i) {
		l.fp8(p+"attn.indexer.wq_b", s.IndexHeads*s.IndexHeadDim, s.QLoRA)
		l.bf16(p+"attn.indexer.weights_proj.weight", s.IndexHeads, s.Hidden)
	}
}

// moe adds the router, the routed experts and the shared expert. hash
// gives the router a tid2eid table in place of its bias.
func (l *layout) moe(p string, experts int, hash bool) {
	s := l.s
	l.bf16(p+"ffn.gate.weight", experts, s.Hidden)
	switch {
	case hash:
		dt := s.HashIDType
		if dt == "" {
			dt = safetensors.I64
		}
		l.add(unit{kind: kindHash, sd: float64(experts),
			tensors: []safetensors.Spec{{Name: p + "ffn.gate.tid2eid", DType: dt, Shape: shape(s.Vocab, s.ActiveExperts)}}})
	default:
		l.normal(p+"ffn.gate.bias", safetensors.F32, 0, 0.01, experts)
	}
	if s.Arch == ArchV41 {
		// The router's bias for image-span tokens.
		l.normal(p+"ffn.gate.bias_vl", safetensors.F32, 0, 0.01, experts)
	}
	for e := range experts {
		g := p + "ffn.experts." + strconv.Itoa(e)
		l.mxfp4(g, g+".w1", s.MoEInter, s.Hidden)
		l.mxfp4(g, g+".w2", s.Hidden, s.MoEInter)
		l.mxfp4(g, g+".w3", s.MoEInter, s.Hidden)
	}
	if s.SharedInter > 0 {
		l.fp8(p+"ffn.shared_experts.w1", s.SharedInter, s.Hidden)
		l.fp8(p+"ffn.shared_experts.w2", s.Hidden, s.SharedInter)
		l.fp8(p+"ffn.shared_experts.w3", s.SharedInter, s.Hidden)
	}
}

// block adds one transformer block under prefix p: main layer i, or a
// stage (i < 0, no compressor).
func (l *layout) block(p string, i int, experts int) {
	s := l.s
	l.hc(p, "attn")
	l.hc(p, "ffn")
	l.norm(p+"attn_norm.weight", s.Hidden)
	l.attentionCore(p)
	if i >= 0 {
		if s.Arch == ArchV41 {
			l.attentionV41(p, i)
		} else {
			l.attentionV4(p, s.ratio(i))
		}
	}
	l.norm(p+"ffn_norm.weight", s.Hidden)
	if i >= 0 && i < s.DenseLayers {
		l.fp8(p+"ffn.w1", s.DenseInter, s.Hidden)
		l.fp8(p+"ffn.w2", s.Hidden, s.DenseInter)
		l.fp8(p+"ffn.w3", s.DenseInter, s.Hidden)
		return
	}
	l.moe(p, experts, i >= s.DenseLayers && i < s.DenseLayers+s.HashLayers)
}

// vision adds V4.1's vision tower, its aligner and nothing else.
func (l *layout) vision() {
	s := l.s
	d := s.VisionDim
	l.bf16("vision.patch_embed.proj.weight", d, visionPatch)
	l.bias("vision.patch_embed.proj.bias", d)
	for i := range s.VisionLayers {
		p := "vision.blocks." + strconv.Itoa(i) + "."
		l.norm(p+"norm1.weight", d)
		l.norm(p+"norm2.weight", d)
		l.bf16(p+"attn.wqkv.weight", 3*d, d)
		l.bias(p+"attn.wqkv.bias", 3*d)
		l.bf16(p+"attn.wo.weight", d, d)
		l.bias(p+"attn.wo.bias", d)
		l.bf16(p+"mlp.w1.weight", 2*s.VisionInter, d) // gate and up fused
		l.bf16(p+"mlp.w2.weight", d, s.VisionInter)
	}
	l.norm("vision.norm.weight", d)
	l.bf16("aligner.w1.weight", s.Hidden, visionMerge*d)
	l.bias("aligner.w1.bias", s.Hidden)
	l.bf16("aligner.w2.weight", s.Hidden, s.Hidden)
	l.bias("aligner.w2.bias", s.Hidden)
}

// engram adds the i-th Engram block, of layer prefix p.
func (l *layout) engram(p string, i int) {
	s := l.s
	rows := s.engramRows(i)
	l.add(unit{kind: kindEngram, tensors: []safetensors.Spec{
		{Name: p + "engram.embed.weight", DType: safetensors.F8E4M3, Shape: []int64{rows, engramDim}},
		{Name: p + "engram.embed.scale", DType: safetensors.F8E8M0, Shape: []int64{rows, engramDim / 32}},
	}})
	if s.Arch != ArchV41 {
		return
	}
	l.bf16(p+"engram.q_weight", s.HCMult, s.Hidden)
	l.bf16(p+"engram.k_weight", s.HCMult, s.Hidden)
	l.fp8(p+"engram.wkv", s.Hidden*(s.HCMult+1), engramOrders*s.EngramHeads*engramDim)
}

// newLayout lists every unit of a validated spec, each tagged with its
// release shard (LAYOUTS.md §9 for V4.1, §13.3 for V4).
func newLayout(s *Spec) *layout {
	l := &layout{s: s}
	if s.Arch == ArchV4 {
		l.layoutV4()
	} else {
		l.layoutV41()
	}
	return l
}

// layoutV41: 1 vision and aligner; 2 embed and image_*; one shard per
// layer; head and norm; one per DSpark stage; one per Engram table.
func (l *layout) layoutV41() {
	s := l.s
	if s.VisionLayers > 0 {
		l.vision()
	}
	l.shard++
	l.bf16("embed.weight", s.Vocab, s.Hidden)
	if s.VisionLayers > 0 {
		for _, n := range []string{"image_start", "image_newline", "image_end"} {
			l.bf16(n, s.Hidden)
		}
	}
	for i := range s.Layers {
		l.shard++
		p := "layers." + strconv.Itoa(i) + "."
		l.block(p, i, s.Experts)
		if k := slices.Index(s.EngramLayers, i); k >= 0 {
			// Released in a shard of its own after the DSpark stages.
			l.shard = s.Layers + s.MTPLayers + 3 + k
			l.engram(p, k)
			l.shard = i + 2
		}
	}
	l.shard = s.Layers + 2
	l.bf16("head.weight", s.Vocab, s.Hidden)
	l.norm("norm.weight", s.Hidden)
	for m := range s.MTPLayers {
		l.shard = s.Layers + 3 + m
		p := "mtp." + strconv.Itoa(m) + "."
		if m == 0 {
			// Projects the target layers' concatenated attention inputs.
			l.fp8(p+"main_proj", s.Hidden, len(s.DSparkTargets)*s.Hidden)
			l.norm(p+"main_norm.weight", s.Hidden)
		}
		l.block(p, -1, s.MTPExperts)
		if m == s.MTPLayers-1 {
			l.norm(p+"norm.weight", s.Hidden)
			l.bf16(p+"markov_head.embed.weight", s.Vocab, s.MarkovRank)
			l.bf16(p+"markov_head.head.weight", s.Vocab, s.MarkovRank)
			l.bf16(p+"confidence_head.proj.weight", 1, s.Hidden+s.MarkovRank)
		}
	}
}

// layoutV4: 1 embed; one shard per layer; head, norm and hc_head; mtp.0.
func (l *layout) layoutV4() {
	s := l.s
	l.bf16("embed.weight", s.Vocab, s.Hidden)
	for i := range s.Layers {
		l.shard++
		p := "layers." + strconv.Itoa(i) + "."
		l.block(p, i, s.Experts)
		if k := slices.Index(s.EngramLayers, i); k >= 0 {
			l.engram(p, k)
		}
	}
	l.shard++
	l.bf16("head.weight", s.Vocab, s.Hidden)
	l.norm("norm.weight", s.Hidden)
	l.hcHead("")
	for m := range s.MTPLayers {
		l.shard++
		p := "mtp." + strconv.Itoa(m) + "."
		l.block(p, -1, s.MTPExperts)
		// The MTP block's input: embedding and main hidden state, each
		// normed and projected.
		l.fp8(p+"e_proj", s.Hidden, s.Hidden)
		l.fp8(p+"h_proj", s.Hidden, s.Hidden)
		l.norm(p+"enorm.weight", s.Hidden)
		l.norm(p+"hnorm.weight", s.Hidden)
		l.norm(p+"norm.weight", s.Hidden)
		l.hcHead(p)
	}
}

package synth

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/dsfs/dsfs/safetensors"
)

// Spec describes a synthetic DeepSeek-V4.1 checkpoint in the official
// "flat" naming. Start from a preset's spec (TinySpec, or Presets) and
// change what a test needs; Validate says what does not fit.
//
// The layout, in the order shards are filled:
//
//	embed.weight                                   BF16 [Vocab, Hidden]
//	layers.L.hc_{attn,ffn}_{fn,base,scale}         F32 hyper-connections
//	layers.L.attn_norm.weight, ffn_norm.weight     BF16 norms
//	layers.L.attn.{wq_a,wq_b,wkv,wo_a,wo_b}        FP8 E4M3 + E8M0 32x32 scales
//	layers.L.attn.{q_norm,kv_norm}.weight          BF16; attn.attn_sink F32 [Heads]
//	layers.L.attn.compressor.*, attn.indexer.*     where CompressRatios[L] > 0 (V4 names)
//	layers.L.ffn.{w1,w2,w3}                        FP8 dense FFN, L < DenseLayers
//	layers.L.ffn.gate.{weight,bias}                BF16 / F32 router, L >= DenseLayers
//	layers.L.ffn.experts.E.w{1,2,3}                MXFP4: I8 [out, in/2] + E8M0 [out, in/32]
//	layers.L.ffn.shared_experts.w{1,2,3}           FP8
//	layers.L.engram.embed                          F8_E4M3 [EngramRows, 256] + E8M0 [EngramRows, 8]
//	norm.weight, head.weight, hc_head_*            final norm, BF16 head, head hyper-connection
//	vision.*                                       BF16 vision tower (patch embed, blocks, projector)
//	mtp.M.*                                        MTP layers: mtp.0.main_proj (FP8) and main_norm,
//	                                               a MoE layer like the above (MTPExperts experts),
//	                                               the last one also norm, hc_head_* and the
//	                                               markov_head / confidence_head projections
//
// Every FP8 weight has a ".scale" of shape [ceil(O/32), ceil(I/32)] and
// every MXFP4 weight one of shape [O, I/32], in the same shard. Routed
// expert widths should be multiples of 256 (q2/ keeps other experts
// native).
type Spec struct {
	// Seed is mixed into every tensor's PRNG seed: two specs that differ
	// only in Seed have different values and the same layout.
	Seed uint64

	Hidden        int // model width (dim, hidden_size)
	Vocab         int
	Layers        int // main layers
	DenseLayers   int // the first DenseLayers layers have a dense FFN, the rest routed experts
	DenseInter    int // width of the dense FFN
	Experts       int // routed experts per MoE layer
	ActiveExperts int // experts per token (config.json only)
	MoEInter      int // routed expert width
	SharedInter   int // width of the one shared expert; 0 for none

	// Attention (V4 names): wq_a [QLoRA, Hidden], wq_b [Heads*HeadDim,
	// QLoRA], wkv [HeadDim, Hidden], wo_a [OGroups*OLoRA,
	// Heads*HeadDim/OGroups], wo_b [Hidden, OGroups*OLoRA].
	QLoRA, Heads, HeadDim, OGroups, OLoRA int
	// IndexHeads and IndexHeadDim size the indexer of ratio-4 layers.
	IndexHeads, IndexHeadDim int
	// CompressRatios gives each main layer's KV compression ratio (V4's
	// compress_ratios): 0 none, 4 an overlapping compressor with an
	// indexer, any other a plain compressor. Nil means none anywhere.
	CompressRatios []int
	// HCMult is the number of hyper-connection streams.
	HCMult int

	// EngramLayers lists the layers with an Engram table of EngramRows rows.
	EngramLayers []int
	EngramRows   int64

	MTPLayers  int // MTP (next-token prediction) layers
	MTPExperts int // routed experts per MTP layer

	// VisionLayers and VisionDim size the vision tower; 0 layers for none.
	VisionLayers, VisionDim int

	// MaxShardBytes is the shard size limit, as save_pretrained's
	// max_shard_size: a shard is closed before a tensor would take it past
	// the limit, and a tensor larger than the limit gets a shard of its own.
	// A weight and its scale are never split.
	MaxShardBytes int64

	// Sparse writes real headers and leaves the data as holes, which read
	// as zeros: the full tensor list of a huge checkpoint in seconds and
	// almost no disk.
	Sparse bool
}

// engramDim is the width of an Engram table row (FORMATS.md).
const engramDim = 256

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
	case s.VisionLayers < 0 || s.VisionLayers > 0 && s.VisionDim <= 0:
		return errors.New("synth: a vision tower needs a positive VisionDim")
	case s.MaxShardBytes <= 0:
		return errors.New("synth: MaxShardBytes must be positive")
	}
	for _, r := range s.CompressRatios {
		if r < 0 {
			return fmt.Errorf("synth: negative compress ratio %d", r)
		}
		if r == 4 && (s.IndexHeads <= 0 || s.IndexHeadDim <= 0) {
			return errors.New("synth: ratio-4 layers need positive IndexHeads and IndexHeadDim")
		}
	}
	seen := make(map[int]bool)
	for _, l := range s.EngramLayers {
		if l < 0 || l >= s.Layers || seen[l] {
			return fmt.Errorf("synth: Engram layer %d is out of range or repeated", l)
		}
		seen[l] = true
	}
	if len(s.EngramLayers) > 0 && s.EngramRows <= 0 {
		return errors.New("synth: Engram tables need positive EngramRows")
	}
	return nil
}

// kind says how a unit's values are generated.
type kind int

const (
	kindMXFP4  kind = iota // I8 packed E2M1 + E8M0 [out, in/32]
	kindFP8                // F8_E4M3 + E8M0 [ceil(out/32), ceil(in/32)]
	kindEngram             // F8_E4M3 [rows, 256] + E8M0 [rows, 8]
	kindBF16               // BF16 weights ~N(0, 0.02)
	kindNormal             // BF16 or F32 mean + sd*N(0, 1), for small tensors
)

// A unit is a weight with its scale (or a lone tensor): the tensors
// generated together and never split across shards.
type unit struct {
	kind     kind
	tensors  []safetensors.Spec // the weight first, then its scale
	mean, sd float64            // kindNormal
	// group names the tensors sharing a scale centre (an expert), for
	// kindMXFP4.
	group string
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
}

func shape(dims ...int) []int64 {
	out := make([]int64, len(dims))
	for i, d := range dims {
		out[i] = int64(d)
	}
	return out
}

func ceil32(n int) int { return (n + 31) / 32 }

func (l *layout) add(u unit) { l.units = append(l.units, u) }

// fp8 adds base.weight [out, in] F8_E4M3 with base.scale E8M0 32x32.
func (l *layout) fp8(base string, out, in int) {
	l.add(unit{kind: kindFP8, tensors: []safetensors.Spec{
		{Name: base + ".weight", DType: safetensors.F8E4M3, Shape: shape(out, in)},
		{Name: base + ".scale", DType: safetensors.F8E8M0, Shape: shape(ceil32(out), ceil32(in))},
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

// hc adds a hyper-connection triple (V4: fn [mix, HCMult*Hidden], base
// [mix], scale [3] with mix = (2+HCMult)*HCMult).
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

func (l *layout) attention(p string, ratio int) {
	s := l.s
	l.fp8(p+"attn.wq_a", s.QLoRA, s.Hidden)
	l.norm(p+"attn.q_norm.weight", s.QLoRA)
	l.fp8(p+"attn.wq_b", s.Heads*s.HeadDim, s.QLoRA)
	l.fp8(p+"attn.wkv", s.HeadDim, s.Hidden)
	l.norm(p+"attn.kv_norm.weight", s.HeadDim)
	l.fp8(p+"attn.wo_a", s.OGroups*s.OLoRA, s.Heads*s.HeadDim/s.OGroups)
	l.fp8(p+"attn.wo_b", s.Hidden, s.OGroups*s.OLoRA)
	l.normal(p+"attn.attn_sink", safetensors.F32, 0, 1, s.Heads)
	if ratio == 0 {
		return
	}
	// Ratio 4 compresses overlapping windows (twice the width) and adds
	// the sparse-attention indexer, as V4's layers do.
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

func (l *layout) moe(p string, experts int) {
	s := l.s
	l.bf16(p+"ffn.gate.weight", experts, s.Hidden)
	l.normal(p+"ffn.gate.bias", safetensors.F32, 0, 0.01, experts)
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

// block adds one transformer block under prefix p.
func (l *layout) block(p string, ratio int, dense bool, experts int) {
	s := l.s
	l.hc(p, "attn")
	l.hc(p, "ffn")
	l.norm(p+"attn_norm.weight", s.Hidden)
	l.attention(p, ratio)
	l.norm(p+"ffn_norm.weight", s.Hidden)
	if dense {
		l.fp8(p+"ffn.w1", s.DenseInter, s.Hidden)
		l.fp8(p+"ffn.w2", s.Hidden, s.DenseInter)
		l.fp8(p+"ffn.w3", s.DenseInter, s.Hidden)
		return
	}
	l.moe(p, experts)
}

func (l *layout) vision() {
	s := l.s
	d := s.VisionDim
	const patch = 3 * 16 * 16 // RGB 16x16 patches
	const positions = 1024
	bias := func(name string, n int) { l.normal(name, safetensors.BF16, 0, 0.02, n) }
	l.bf16("vision.patch_embed.weight", d, patch)
	l.bf16("vision.pos_embed", positions, d)
	for i := range s.VisionLayers {
		p := "vision.blocks." + strconv.Itoa(i) + "."
		l.norm(p+"norm1.weight", d)
		bias(p+"norm1.bias", d)
		l.bf16(p+"attn.qkv.weight", 3*d, d)
		bias(p+"attn.qkv.bias", 3*d)
		l.bf16(p+"attn.proj.weight", d, d)
		bias(p+"attn.proj.bias", d)
		l.norm(p+"norm2.weight", d)
		bias(p+"norm2.bias", d)
		l.bf16(p+"mlp.fc1.weight", 4*d, d)
		bias(p+"mlp.fc1.bias", 4*d)
		l.bf16(p+"mlp.fc2.weight", d, 4*d)
		bias(p+"mlp.fc2.bias", d)
	}
	l.norm("vision.norm.weight", d)
	bias("vision.norm.bias", d)
	l.bf16("vision.projector.weight", s.Hidden, 4*d) // merges 2x2 patches into one token
}

// newLayout lists every unit of a validated spec.
func newLayout(s *Spec) *layout {
	l := &layout{s: s}
	l.bf16("embed.weight", s.Vocab, s.Hidden)
	engram := make(map[int]bool)
	for _, e := range s.EngramLayers {
		engram[e] = true
	}
	for i := range s.Layers {
		p := "layers." + strconv.Itoa(i) + "."
		ratio := 0
		if s.CompressRatios != nil {
			ratio = s.CompressRatios[i]
		}
		l.block(p, ratio, i < s.DenseLayers, s.Experts)
		if engram[i] {
			l.add(unit{kind: kindEngram, tensors: []safetensors.Spec{
				{Name: p + "engram.embed.weight", DType: safetensors.F8E4M3, Shape: []int64{s.EngramRows, engramDim}},
				{Name: p + "engram.embed.scale", DType: safetensors.F8E8M0, Shape: []int64{s.EngramRows, engramDim / 32}},
			}})
		}
	}
	l.norm("norm.weight", s.Hidden)
	l.bf16("head.weight", s.Vocab, s.Hidden)
	l.hcHead("")
	if s.VisionLayers > 0 {
		l.vision()
	}
	for m := range s.MTPLayers {
		p := "mtp." + strconv.Itoa(m) + "."
		if m == 0 {
			// The draft's input projection of [embedding; main hidden state].
			l.fp8(p+"main_proj", s.Hidden, 2*s.Hidden)
			l.norm(p+"main_norm.weight", s.Hidden)
		}
		l.block(p, 0, false, s.MTPExperts)
		if m == s.MTPLayers-1 {
			l.norm(p+"norm.weight", s.Hidden)
			l.hcHead(p)
			l.bf16(p+"markov_head.markov_w1.weight", s.Hidden, s.Hidden)
			l.bf16(p+"markov_head.markov_w2.weight", s.Hidden, s.Hidden)
			l.bf16(p+"confidence_head.proj.weight", 1, s.Hidden)
		}
	}
	return l
}

package checkpoint

import (
	"fmt"
	"strings"

	"github.com/dsfs/dsfs/safetensors"
)

// Scale tensors sit beside their weight under one of these suffixes:
// ".scale" in DeepSeek's own (flat) names, ".weight_scale_inv" in Hugging
// Face names.
const (
	weightSuffix   = ".weight"
	scaleSuffix    = ".scale"
	scaleInvSuffix = ".weight_scale_inv"
)

// classify sets the role, position and format of every tensor of ts
// (sorted by name) and pairs weights with their scales. It reads names,
// dtypes and shapes only, never counts.
func classify(ts []*Tensor, cfg *Config, problem func(file, tensor, reason string)) {
	for _, t := range ts {
		n := classifyName(t.Name, cfg.NumLayers)
		t.Role, t.Layer, t.Expert, t.MTP, t.Proj = n.role, n.layer, n.expert, n.mtp, n.proj
		t.Format = dtypeFormat(t.DType)
	}
	for _, s := range ts {
		base, ok := strings.CutSuffix(s.Name, scaleSuffix)
		if !ok {
			base, ok = strings.CutSuffix(s.Name, scaleInvSuffix)
		}
		if !ok {
			continue
		}
		w := findTensor(ts, base, weightSuffix)
		if w == nil {
			continue // a scale whose weight is elsewhere at fault, or none
		}
		if w.Scale != nil {
			problem(s.Shard.Name, s.Name, fmt.Sprintf("%s already pairs with %s; left unpaired", w.Name, w.Scale.Name))
			continue
		}
		wf, sf, block, reason := pairFormat(w, s, cfg.Quant.WeightBlockSize)
		if reason != "" {
			problem(s.Shard.Name, s.Name, reason)
			continue
		}
		w.Scale, s.ScaleOf = s, w
		w.Format, s.Format = wf, sf
		w.Block, s.Block = block, block
	}
}

// pairFormat decides whether s is a valid scale for weight w and what
// formats the pair has; it returns a reason when it is not.
func pairFormat(w, s *Tensor, pref [2]int64) (wf, sf Format, block [2]int64, reason string) {
	switch {
	case w.DType == safetensors.I8 && s.DType == safetensors.F8E8M0:
		if mxfp4ScaleFits(w.Shape, s.Shape) {
			return FormatMXFP4, FormatMXFP4Scale, block, ""
		}
		return "", "", block, fmt.Sprintf("MXFP4 scale shape %v does not fit weight %s %v (one scale per 32 packed 4-bit elements)",
			s.Shape, w.Name, w.Shape)
	case w.DType == safetensors.F8E4M3 && (s.DType == safetensors.F8E8M0 || s.DType == safetensors.F32):
		if b, ok := fp8Block(w.Shape, s.Shape, pref); ok {
			return FormatFP8, FormatFP8Scale, b, ""
		}
		return "", "", block, fmt.Sprintf("FP8 scale shape %v does not fit weight %s %v with any block",
			s.Shape, w.Name, w.Shape)
	}
	return "", "", block, fmt.Sprintf("a %s scale does not fit the %s weight %s", s.DType, w.DType, w.Name)
}

// mxfp4ScaleFits reports whether scale has one element per 32 logical
// (4-bit) elements of the I8 weight: [..., C] -> [..., 2C/32].
func mxfp4ScaleFits(weight, scale []int64) bool {
	if len(weight) == 0 || len(weight) != len(scale) {
		return false
	}
	last := len(weight) - 1
	for i := range last {
		if weight[i] != scale[i] {
			return false
		}
	}
	return (2*weight[last])%32 == 0 && scale[last] == 2*weight[last]/32
}

// fp8Block finds the block [br, bc] with scale == [ceil(O/br), ceil(I/bc)]
// for a weight [O, I]: per dimension the preferred (config) size when it
// fits, else the smallest power of two that does.
func fp8Block(weight, scale []int64, pref [2]int64) ([2]int64, bool) {
	var b [2]int64
	if len(weight) != 2 || len(scale) != 2 {
		return b, false
	}
	for d := range 2 {
		size, ok := blockDim(weight[d], scale[d], pref[d])
		if !ok {
			return b, false
		}
		b[d] = size
	}
	return b, true
}

func blockDim(n, blocks, pref int64) (int64, bool) {
	fits := func(size int64) bool { return ceilDiv(n, size) == blocks }
	if pref > 0 && fits(pref) {
		return pref, true
	}
	// ceil(n/size) only falls as size grows.
	for size := int64(1); size > 0; size <<= 1 {
		if fits(size) {
			return size, true
		}
		if ceilDiv(n, size) < blocks {
			break
		}
	}
	return 0, false
}

func ceilDiv(n, d int64) int64 {
	q := n / d
	if n%d != 0 {
		q++
	}
	return q
}

// dtypeFormat is the format of a tensor before pairing: quantised formats
// need a scale, so I8 and F8_E4M3 start as other.
func dtypeFormat(d safetensors.DType) Format {
	switch d {
	case safetensors.BF16:
		return FormatBF16
	case safetensors.F16:
		return FormatF16
	case safetensors.F32:
		return FormatF32
	case safetensors.F8E8M0:
		return FormatE8M0
	}
	return FormatOther
}

// nameClass is what a tensor name says.
type nameClass struct {
	role               Role
	layer, expert, mtp int
	proj               string
}

// classifyName reads role and position from a name in any of the three
// layouts: DeepSeek-V4 flat names (layers.L.ffn.experts.E.w1.weight,
// mtp.M..., embed.weight, head.weight), and Hugging Face names as
// DeepSeek-V2/V3 use them (model.layers.L.mlp.experts.E.gate_proj.weight,
// model.embed_tokens.weight, lm_head.weight). A layer index at or past
// numLayers (when known) is a multi-token-prediction layer.
func classifyName(name string, numLayers int) nameClass {
	r := nameClass{role: RoleOther, layer: -1, expert: -1, mtp: -1}
	var buf [16]string
	c := splitName(name, buf[:0])
	if len(c) > 0 && c[0] == "model" {
		c = c[1:]
	}
	if len(c) > 0 && (c[0] == "language_model" || c[0] == "text_model") {
		c = c[1:]
	}
	if len(c) == 0 {
		return r
	}
	switch {
	case c[0] == "aligner" || strings.HasSuffix(c[0], "projector"):
		r.role = RoleVisionProjector
		return r
	case isVision(c[0]):
		r.role = RoleVision
		return r
	case len(c) == 1 && strings.HasPrefix(c[0], "image_"):
		r.role = RoleImageToken
		return r
	}
	if len(c) >= 3 {
		if n, ok := number(c[1]); ok {
			switch c[0] {
			case "layers":
				r.layer, c = n, c[2:]
				if numLayers > 0 && n >= numLayers {
					r.mtp = n - numLayers
				}
			case "mtp":
				r.mtp, c = n, c[2:]
			}
		}
	}
	ffn := len(c) >= 3 && (c[0] == "ffn" || c[0] == "mlp")
	switch {
	case hasPrefixComponent(c, "hc_"):
		r.role = RoleMHC
	case ffn && c[1] == "experts" && len(c) >= 4:
		e, ok := number(c[2])
		if !ok {
			break
		}
		r.expert, r.proj = e, proj(c[3])
		r.role = RoleRoutedExpert
		if r.mtp >= 0 {
			r.role = RoleMTPExpert
		}
	case ffn && c[1] == "shared_experts":
		r.role, r.proj = RoleSharedExpert, proj(c[2])
	case ffn && c[1] == "gate":
		r.role = RoleRouter
	case ffn && proj(c[1]) != "":
		r.role, r.proj = RoleDense, proj(c[1])
	case c[0] == "engram" && len(c) >= 2 && c[1] == "embed":
		r.role = RoleEngram
	case c[0] == "engram":
		r.role = RoleEngramProj
	case r.mtp >= 0 && (c[0] == "markov_head" || c[0] == "confidence_head"):
		r.role = RoleDraftHead
	case r.mtp >= 0 && isMTPProj(c[0]):
		r.role = RoleMTPProj
	case c[0] == "attn" || c[0] == "self_attn":
		r.role = RoleAttention
	case hasComponent(c, isNorm):
		r.role = RoleNorm
	case hasComponent(c, isEmbed):
		r.role = RoleEmbed
	case hasComponent(c, isHead):
		r.role = RoleHead
	}
	return r
}

// splitName splits a dotted name into buf; components past its capacity
// stay joined in the last one.
func splitName(name string, buf []string) []string {
	for len(buf) < cap(buf)-1 {
		i := strings.IndexByte(name, '.')
		if i < 0 {
			break
		}
		buf = append(buf, name[:i])
		name = name[i+1:]
	}
	return append(buf, name)
}

// number parses a layer or expert number: decimal digits only.
func number(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// proj names an FFN projection the DeepSeek way: w1 = gate_proj,
// w2 = down_proj, w3 = up_proj.
func proj(s string) string {
	switch s {
	case "w1", "gate_proj":
		return "w1"
	case "w2", "down_proj":
		return "w2"
	case "w3", "up_proj":
		return "w3"
	}
	return ""
}

func isVision(first string) bool {
	return strings.HasPrefix(first, "vision") || strings.HasPrefix(first, "visual") || first == "vit"
}

// isMTPProj matches the input projections of an MTP block: main_proj
// (V4.1 DSpark), e_proj and h_proj (V4), eh_proj (V3).
func isMTPProj(s string) bool {
	return s == "main_proj" || s == "e_proj" || s == "h_proj" || s == "eh_proj"
}

// isNorm matches attn_norm, ffn_norm, enorm, hnorm, input_layernorm,
// post_attention_layernorm, norm, ...
func isNorm(s string) bool { return strings.HasSuffix(s, "norm") }

func isEmbed(s string) bool {
	return s == "embed" || s == "embed_tokens" || s == "emb" || s == "tok_emb"
}

// isHead matches head, lm_head and the MTP heads (shared_head, ...).
func isHead(s string) bool { return s == "head" || s == "lm_head" || strings.HasSuffix(s, "_head") }

func hasComponent(c []string, match func(string) bool) bool {
	for _, s := range c {
		if match(s) {
			return true
		}
	}
	return false
}

func hasPrefixComponent(c []string, prefix string) bool {
	return hasComponent(c, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

package nvfp4

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/vfile"
)

// The loader contract. vLLM, SGLang and TensorRT-LLM load DeepSeek-V4 and
// V4.1 with NVFP4 routed experts the way NVIDIA's Model-Optimizer writes
// them (docs/LOADERS.md gives each rule's source): config.json keeps its
// FP8 quantization_config (quant_method fp8, the source's block size,
// scale format and activation scheme) and adds quant_algo
// MIXED_PRECISION, moe_quant_algo NVFP4, expert_dtype fp4, group_size 16,
// kv_cache_quant_algo null, the quantised layers and an ignore list of
// fnmatch patterns naming every module that is not NVFP4;
// hf_quant_config.json says the same in ModelOpt's nested form.

// nvidiaIgnore are the patterns NVIDIA's build lists; mtp.* only while the
// MTP experts stay MXFP4.
var nvidiaIgnore = []string{"*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*"}

// digits matches a name's numeric components, which a pattern generalises.
var digits = regexp.MustCompile(`(^|\.)\d+(\.|$)`)

// Ignore is the ignore (exclude_modules) list: NVIDIA's patterns, then,
// for each module of the checkpoint that is neither an NVFP4 expert nor
// covered yet (a module: a tensor name ending in .weight, less it), its
// name with every numeric component a wildcard, sorted.
func (n *Transcoder) Ignore() []string {
	var ignore []string
	for _, p := range nvidiaIgnore {
		if p == "mtp.*" && n.opt.MTP {
			continue
		}
		ignore = append(ignore, p)
	}
	nvfp4 := make(map[string]bool, len(n.experts))
	for _, t := range n.experts {
		nvfp4[base(t.Name)] = true
	}
	var extra []string
	for _, t := range n.cat.Tensors {
		if !strings.HasSuffix(t.Name, ".weight") {
			continue
		}
		m := base(t.Name)
		if nvfp4[m] || matchAny(m, ignore) || matchAny(m, extra) {
			continue
		}
		extra = append(extra, generalise(m))
	}
	slices.Sort(extra)
	return append(ignore, extra...)
}

// generalise turns every numeric component of a module name into *.
func generalise(m string) string {
	for {
		g := digits.ReplaceAllString(m, "$1*$2")
		if g == m {
			return g
		}
		m = g
	}
}

func matchAny(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// QuantizedLayers are the expert modules the view holds as NVFP4, as
// ModelOpt names them: layers.N.ffn.experts (mtp.N.ffn.experts with
// Options.MTP), each {"quant_algo": "NVFP4", "group_size": 16}.
func (n *Transcoder) QuantizedLayers() map[string]any {
	out := make(map[string]any)
	// One value for every module: a checkpoint has thousands of experts
	// but tens of expert modules.
	nvfp4 := map[string]any{"quant_algo": "NVFP4", "group_size": 16}
	for _, t := range n.experts {
		m := base(t.Name) // layers.N.ffn.experts.E.w1
		if i := strings.Index(m, ".experts."); i >= 0 {
			out[m[:i+len(".experts")]] = nvfp4
		}
	}
	return out
}

// ConfigPatch sets config.json's quantization_config to the contract (and
// the same under text_config where the source nests one there), and the
// top-level expert_dtype where DeepSeek-V4 writes one. Nothing is set for
// a checkpoint without MXFP4 experts, or without a quantization_config
// naming its quant_method: loaders dispatch on it, and a claim of a
// conversion that did not happen would mislead them.
func (n *Transcoder) ConfigPatch() map[string]any {
	p := make(map[string]any)
	for _, scope := range [][]string{nil, {"text_config"}} {
		q := n.cat.Config.Raw
		for _, k := range scope {
			q, _ = q[k].(map[string]any)
		}
		qc, _ := q["quantization_config"].(map[string]any)
		if method, _ := qc["quant_method"].(string); method == "" || len(n.experts) == 0 {
			continue
		}
		prefix := strings.Join(append(scope, "quantization_config"), ".") + "."
		for k, v := range n.quantKeys() {
			p[prefix+k] = v
		}
		if _, ok := qc["activation_scheme"]; !ok {
			p[prefix+"activation_scheme"] = "dynamic" // vLLM's Fp8Config requires one
		}
	}
	if len(p) == 0 {
		return nil
	}
	if _, ok := n.cat.Config.Raw["expert_dtype"]; ok {
		p["expert_dtype"] = "fp4"
	}
	return p
}

// quantKeys are the keys the contract sets in a quantization_config.
func (n *Transcoder) quantKeys() map[string]any {
	k := map[string]any{
		"quant_algo":          "MIXED_PRECISION",
		"moe_quant_algo":      "NVFP4",
		"expert_dtype":        "fp4",
		"group_size":          16,
		"kv_cache_quant_algo": nil,
		"ignore":              n.Ignore(),
		"quantized_layers":    n.QuantizedLayers(),
		"producer":            n.opt.Producer,
	}
	if c := n.cal; c != nil {
		k["calibration"] = c.record()
	}
	return k
}

// record is the calibration's identity as the quantisation configs give it.
func (c *calibration) record() map[string]any {
	return map[string]any{"prompts_sha256": c.SHA256, "tokens": c.Tokens, "precision": c.Precision,
		"input_scale": fmt.Sprintf("amax/(6*448) of the activations entering each expert matrix (amax/%d)", inputScaleDivisor)}
}

// hfQuantConfig is hf_quant_config.json: the contract in ModelOpt's
// nested form, and the calibration set when there is one.
func (n *Transcoder) hfQuantConfig() []byte {
	doc := map[string]any{
		"producer": n.opt.Producer,
		"quantization": map[string]any{
			"quant_algo":          "MIXED_PRECISION",
			"kv_cache_quant_algo": nil,
			"group_size":          16,
			"quantized_layers":    n.QuantizedLayers(),
			"exclude_modules":     n.Ignore(),
		},
	}
	if c := n.cal; c != nil {
		doc["calibration"] = c.record()
	}
	return vfile.MustJSON(doc)
}

// Stats are the view's live figures for .dsfs/stats.json: the
// weight_scale blocks made so far and how many of them were clamped (the
// pair spans more than E4M3's range: lossy where a code is not zero;
// TRANSCODE.json counts those), and the calibration's state.
func (n *Transcoder) Stats() any {
	s := map[string]any{"experts": len(n.experts), "mtp_converted": n.opt.MTP,
		"weight_scale_blocks": n.blocks.Load(), "clamped_blocks": n.clamped.Load()}
	if n.cal != nil {
		s["calibration"] = n.cal.stats()
	} else {
		s["calibration"] = "none: every input_scale is 1.0"
	}
	return s
}

package deepseek2

import (
	"fmt"
	"strings"
)

// Naming is how a checkpoint names its tensors: Hugging Face names
// (model.layers.L.self_attn.q_proj.weight) or the flat names of DeepSeek's
// inference code (layers.L.attn.wq.weight), which its convert.py derives
// from the former.
type Naming int

// The namings a checkpoint can use.
const (
	NamingHF Naming = iota
	NamingFlat
)

func (n Naming) String() string {
	if n == NamingFlat {
		return "flat (DeepSeek inference)"
	}
	return "Hugging Face"
}

// hfParts maps the components of a flat name to their Hugging Face
// spelling (DeepSeek-V3 inference/convert.py's mapping, reversed).
var hfParts = map[string]string{
	"attn":      "self_attn",
	"ffn":       "mlp",
	"attn_norm": "input_layernorm",
	"ffn_norm":  "post_attention_layernorm",
	"wq":        "q_proj",
	"wq_a":      "q_a_proj",
	"q_norm":    "q_a_layernorm",
	"wq_b":      "q_b_proj",
	"wkv_a":     "kv_a_proj_with_mqa",
	"kv_norm":   "kv_a_layernorm",
	"wkv_b":     "kv_b_proj",
	"wo":        "o_proj",
	"w1":        "gate_proj",
	"w2":        "down_proj",
	"w3":        "up_proj",
	"embed":     "embed_tokens",
}

// Name spells the flat name flat ("layers.3.attn.wq.weight",
// "embed.weight") in naming n.
func (n Naming) Name(flat string) string {
	if n == NamingFlat {
		return flat
	}
	parts := strings.Split(flat, ".")
	for i, p := range parts {
		if h, ok := hfParts[p]; ok {
			parts[i] = h
		}
	}
	name := strings.Join(parts, ".")
	// The router's correction bias: ffn.gate.bias in flat names.
	name = strings.Replace(name, "mlp.gate.bias", "mlp.gate.e_score_correction_bias", 1)
	return "model." + name
}

// layerName is the flat name of a tensor of layer l.
func layerName(l int, rest string) string { return fmt.Sprintf("layers.%d.%s", l, rest) }

// expertName is the flat name of projection proj (w1, w2, w3) of routed
// expert e of layer l.
func expertName(l, e int, proj string) string {
	return fmt.Sprintf("layers.%d.ffn.experts.%d.%s.weight", l, e, proj)
}

package gguf

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// planDeepseek2 is the deepseek2 recipe (DeepSeek-V2, V2-Lite, V3, R1)
// with every matrix stored as mat (BF16 or Q8_0), as convert_hf_to_gguf.py
// --outtype bf16 / q8_0 writes it: norms, the router and its bias F32,
// routed experts stacked per layer, kv_b split into attn_k_b (transposed
// per head) and attn_v_b, MTP layers left out. With mat IQ2_XXS the
// matrices are BF16 but for the routed experts: IQ2_XXS for gate and up,
// Q2_K for down (q2/'s recipe), BF16 where a row is not whole 256-blocks.
func planDeepseek2(mat Type, tok *tokenizers) func(cat *checkpoint.Catalog) (*Model, error) {
	return func(cat *checkpoint.Catalog) (*Model, error) {
		if cat.ConfigBytes == nil {
			return nil, fmt.Errorf("config.json: missing")
		}
		// The family first: another family's config would fail with the
		// V2/V3 engine's reasons, which say nothing of llama.cpp.
		if f := cat.Config.Family; f != checkpoint.DeepSeekV2 && f != checkpoint.DeepSeekV3 {
			return nil, fmt.Errorf("config.json: model_type %q is not deepseek_v2 or deepseek_v3 (llama.cpp's deepseek2 architecture)", cat.Config.ModelType)
		}
		cfg, err := deepseek2.ParseConfig(cat.ConfigBytes)
		if err != nil {
			return nil, err // it names config.json
		}
		p := &ds2{cat: cat, cfg: cfg, mat: mat, tok: tok}
		switch {
		case cat.Tensor("model.embed_tokens.weight") != nil:
			p.naming = deepseek2.NamingHF
		case cat.Tensor("embed.weight") != nil:
			p.naming = deepseek2.NamingFlat
		default:
			return nil, fmt.Errorf("no embedding table (model.embed_tokens.weight or embed.weight)")
		}
		kvs, err := p.kvs()
		if err != nil {
			return nil, err
		}
		if err := p.tensors(); err != nil {
			return nil, err
		}
		return &Model{Name: modelName(cat.Dir) + "-" + mat.Name, KVs: kvs, Tensors: p.out, Note: p.unquantised()}, nil
	}
}

// unquantised says, for the IQ2_XXS recipe, that no routed expert is
// quantised and why, or "" when some is: ggml's IQ2_XXS and Q2_K pack 256
// weights a block along a row, so rows of other widths stay BF16.
func (p *ds2) unquantised() string {
	if p.mat != IQ2_XXS {
		return ""
	}
	var widths []string
	for _, t := range p.out {
		switch {
		case t.Type == IQ2_XXS || t.Type == Q2_K:
			return ""
		case strings.HasSuffix(t.Name, "_exps.weight"):
			base := strings.TrimSuffix(t.Name, "_exps.weight") // blk.N.ffn_gate
			proj := base[strings.LastIndex(base, "ffn_")+len("ffn_"):]
			if w := fmt.Sprintf("%d (%s)", t.Ne[0], proj); !slices.Contains(widths, w) {
				widths = append(widths, w)
			}
		}
	}
	if len(widths) == 0 {
		return "This checkpoint has no routed experts to quantise: every matrix is BF16, as in BF16/."
	}
	return fmt.Sprintf("No routed expert is quantised here: IQ2_XXS and Q2_K pack 256 weights a block along a row, and this checkpoint's expert rows hold %s weights, so they stay BF16 and the file is the size of BF16/'s.", strings.Join(widths, ", "))
}

// ds2 is the state of planning one deepseek2 model.
type ds2 struct {
	cat    *checkpoint.Catalog
	cfg    *deepseek2.Config
	naming deepseek2.Naming
	mat    Type
	tok    *tokenizers
	out    []Tensor
}

// src finds the source tensor of a flat name.
func (p *ds2) src(flat string) (*checkpoint.Tensor, error) {
	name := p.naming.Name(flat)
	if flat == "head.weight" && p.naming == deepseek2.NamingHF {
		name = "lm_head.weight"
	}
	t := p.cat.Tensor(name)
	if t == nil {
		return nil, fmt.Errorf("tensor %s: missing", name)
	}
	return t, nil
}

// typeFor is the converter's output type of a tensor: F32 for vectors,
// norms, the router and anything not a .weight; otherwise the recipe's
// matrix type, or F16 when a row is not a whole number of its blocks (the
// converter's fallback for Q8_0).
func (p *ds2) typeFor(name string, ne []int64) Type {
	switch {
	case len(ne) == 1, path.Ext(name) != ".weight", strings.HasSuffix(name, "_norm.weight"), strings.HasSuffix(name, "ffn_gate_inp.weight"):
		return F32
	case p.mat == IQ2_XXS:
		switch {
		case !strings.HasSuffix(name, "_exps.weight") || ne[0]%IQ2_XXS.BlockWeights != 0:
			return BF16
		case strings.HasSuffix(name, "ffn_down_exps.weight"):
			return Q2_K
		}
		return IQ2_XXS
	case ne[0]%p.mat.BlockWeights != 0:
		return F16
	}
	return p.mat
}

// add appends a tensor made of whole source tensors, row for row.
func (p *ds2) add(name string, ne []int64, srcs ...*checkpoint.Tensor) {
	t := Tensor{TensorInfo: TensorInfo{Name: name, Ne: ne}}
	t.Type = p.typeFor(name, ne)
	typ := t.Type
	for _, s := range srcs {
		rows := s.Size / (int64(s.DType.Bits()) * cols(s) / 8)
		if s.Format != checkpoint.FormatFP8 && sameBytes(s, t.Type) {
			t.Parts = append(t.Parts, Part{Rows: rows, Src: s})
			continue
		}
		t.Parts = append(t.Parts, Part{Rows: rows, Src: s, Bytes: func(lo, hi int64, dst []byte) error { return encodeRows(s, lo, hi, typ, dst) }})
	}
	p.out = append(p.out, t)
}

// addFlat adds the tensor of a flat source name under a GGUF name; the
// shape is the source's, reversed.
func (p *ds2) addFlat(gguf, flat string) error {
	s, err := p.src(flat)
	if err != nil {
		return err
	}
	p.add(gguf, reversed(s.Shape), s)
	return nil
}

func reversed(shape []int64) []int64 {
	ne := make([]int64, len(shape))
	for i, n := range shape {
		ne[len(shape)-1-i] = n
	}
	return ne
}

func (p *ds2) tensors() error {
	c := p.cfg
	if err := p.addFlat("token_embd.weight", "embed.weight"); err != nil {
		return err
	}
	if err := p.addFlat("output_norm.weight", "norm.weight"); err != nil {
		return err
	}
	if tied, _ := p.cat.Config.Raw["tie_word_embeddings"].(bool); !tied {
		if err := p.addFlat("output.weight", "head.weight"); err != nil {
			return err
		}
	}
	for l := range c.Layers {
		blk := fmt.Sprintf("blk.%d.", l)
		lay := fmt.Sprintf("layers.%d.", l)
		pairs := [][2]string{
			{"attn_norm.weight", "attn_norm.weight"},
			{"ffn_norm.weight", "ffn_norm.weight"},
			{"attn_kv_a_mqa.weight", "attn.wkv_a.weight"},
			{"attn_kv_a_norm.weight", "attn.kv_norm.weight"},
			{"attn_output.weight", "attn.wo.weight"},
		}
		if c.QLoRA > 0 {
			pairs = append(pairs, [][2]string{{"attn_q_a.weight", "attn.wq_a.weight"}, {"attn_q_a_norm.weight", "attn.q_norm.weight"}, {"attn_q_b.weight", "attn.wq_b.weight"}}...)
		} else {
			pairs = append(pairs, [2]string{"attn_q.weight", "attn.wq.weight"})
		}
		if !c.IsMoE(l) {
			pairs = append(pairs, [][2]string{{"ffn_gate.weight", "ffn.w1.weight"}, {"ffn_down.weight", "ffn.w2.weight"}, {"ffn_up.weight", "ffn.w3.weight"}}...)
		} else {
			pairs = append(pairs, [2]string{"ffn_gate_inp.weight", "ffn.gate.weight"})
			if c.SharedExperts > 0 {
				pairs = append(pairs, [][2]string{{"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"}, {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"}, {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"}}...)
			}
		}
		for _, pr := range pairs {
			if err := p.addFlat(blk+pr[0], lay+pr[1]); err != nil {
				return err
			}
		}
		if c.IsMoE(l) {
			if t, _ := p.src(lay + "ffn.gate.bias"); t != nil {
				p.add(blk+"exp_probs_b.bias", reversed(t.Shape), t)
			}
			if err := p.experts(l); err != nil {
				return err
			}
		}
		if err := p.kvB(l); err != nil {
			return err
		}
	}
	return nil
}

// experts stacks the routed experts of layer l in expert order: the
// stacked tensor's rows are expert 0's rows, then expert 1's, ...
func (p *ds2) experts(l int) error {
	c := p.cfg
	for _, pr := range [][2]string{{"ffn_gate_exps", "w1"}, {"ffn_down_exps", "w2"}, {"ffn_up_exps", "w3"}} {
		srcs := make([]*checkpoint.Tensor, c.RoutedExperts)
		for e := range srcs {
			s, err := p.src(fmt.Sprintf("layers.%d.ffn.experts.%d.%s.weight", l, e, pr[1]))
			if err != nil {
				return err
			}
			if len(s.Shape) != 2 || (e > 0 && (s.Shape[0] != srcs[0].Shape[0] || s.Shape[1] != srcs[0].Shape[1])) {
				return fmt.Errorf("tensor %s: shape %v does not stack with expert 0's %v", s.Name, s.Shape, srcs[0].Shape)
			}
			srcs[e] = s
		}
		p.add(fmt.Sprintf("blk.%d.%s.weight", l, pr[0]), []int64{srcs[0].Shape[1], srcs[0].Shape[0], int64(c.RoutedExperts)}, srcs...)
	}
	return nil
}

// kvB splits kv_b_proj [H·(nope+v), kvr] as the converter does:
// k_b[h] = W[h·(nope+v) : h·(nope+v)+nope, :]ᵀ, numpy [H, kvr, nope] (ne
// {nope, kvr, H}), and v_b[h] = W[h·(nope+v)+nope : (h+1)·(nope+v), :],
// numpy [H, v, kvr] (ne {kvr, v, H}).
func (p *ds2) kvB(l int) error {
	c := p.cfg
	w, err := p.src(fmt.Sprintf("layers.%d.attn.wkv_b.weight", l))
	if err != nil {
		return err
	}
	H, nope, v, kvr := int64(c.Heads), int64(c.QKNope), int64(c.VHead), int64(c.KVLoRA)
	if len(w.Shape) != 2 || w.Shape[0] != H*(nope+v) || w.Shape[1] != kvr {
		return fmt.Errorf("tensor %s: shape %v, want [%d, %d]", w.Name, w.Shape, H*(nope+v), kvr)
	}
	kb := Tensor{TensorInfo: TensorInfo{Name: fmt.Sprintf("blk.%d.attn_k_b.weight", l), Ne: []int64{nope, kvr, H}}}
	kb.Type = p.typeFor(kb.Name, kb.Ne)
	kb.Parts = []Part{{Rows: H * kvr, Src: w, Decode: func(lo, hi int64) ([]float32, error) {
		// Output row r is column r%kvr of head r/kvr's nope rows.
		out := make([]float32, 0, (hi-lo)*nope)
		for h := lo / kvr; h*kvr < hi; h++ {
			rows, err := DecodeRows(w, h*(nope+v), h*(nope+v)+nope)
			if err != nil {
				return nil, err
			}
			for col := max(lo-h*kvr, 0); col < min(hi-h*kvr, kvr); col++ {
				for j := range nope {
					out = append(out, rows[j*kvr+col])
				}
			}
		}
		return out, nil
	}}}
	vb := Tensor{TensorInfo: TensorInfo{Name: fmt.Sprintf("blk.%d.attn_v_b.weight", l), Ne: []int64{kvr, v, H}}}
	vb.Type = p.typeFor(vb.Name, vb.Ne)
	vb.Parts = []Part{{Rows: H * v, Src: w, Decode: func(lo, hi int64) ([]float32, error) {
		out := make([]float32, 0, (hi-lo)*kvr)
		for r := lo; r < hi; {
			h, j := r/v, r%v
			end := min(hi, (h+1)*v) // rows of this head
			rows, err := DecodeRows(w, h*(nope+v)+nope+j, h*(nope+v)+nope+j+(end-r))
			if err != nil {
				return nil, err
			}
			out = append(out, rows...)
			r = end
		}
		return out, nil
	}}}
	p.out = append(p.out, kb, vb)
	return nil
}

// kvs is the deepseek2 metadata convert_hf_to_gguf.py writes, with
// general.alignment set to a page.
func (p *ds2) kvs() ([]KV, error) {
	c := p.cfg
	raw := p.cat.Config.Raw
	const a = "deepseek2."
	ftype := uint32(FileTypeMostlyBF16)
	switch p.mat {
	case Q8_0:
		ftype = FileTypeMostlyQ8_0
	case IQ2_XXS:
		ftype = FileTypeMostlyIQ2_XXS
	}
	ctx, ok := rawInt(raw, "max_position_embeddings")
	if !ok {
		return nil, fmt.Errorf("config.json: max_position_embeddings missing or not a positive integer")
	}
	kvs := append(generalKVs("deepseek2", p.cat.Dir, ftype), []KV{
		{a + "block_count", uint32(c.Layers)},
		{a + "context_length", uint32(ctx)},
		{a + "embedding_length", uint32(c.Hidden)},
		{a + "feed_forward_length", uint32(c.Inter)},
		{a + "attention.head_count", uint32(c.Heads)},
		{a + "attention.head_count_kv", uint32(1)},
		{a + "rope.freq_base", float32(c.RopeTheta)},
		{a + "attention.layer_norm_rms_epsilon", float32(c.RMSNormEps)},
		{a + "expert_used_count", uint32(c.TopK)},
		{a + "expert_group_count", uint32(max(c.Groups, 1))},
		{a + "expert_group_used_count", uint32(max(c.TopKGroups, 1))},
	}...)
	switch c.ScoringFunc {
	case "sigmoid":
		kvs = append(kvs, KV{a + "expert_gating_func", uint32(2)})
	case "softmax":
		kvs = append(kvs, KV{a + "expert_gating_func", uint32(1)})
	default:
		return nil, fmt.Errorf("config.json: scoring_func %q has no llama.cpp gating function", c.ScoringFunc)
	}
	kvs = append(kvs,
		KV{a + "leading_dense_block_count", uint32(c.DenseLayers)},
		KV{a + "vocab_size", uint32(c.Vocab)},
		// Written as 0 when null (V2-Lite): llama.cpp requires the key
		// unless the layer count is V2-Lite's 26/27, and 0 selects attn_q.
		KV{a + "attention.q_lora_rank", uint32(c.QLoRA)},
		KV{a + "attention.kv_lora_rank", uint32(c.KVLoRA)},
		KV{a + "attention.key_length", uint32(c.KVLoRA + c.QKRope)},
		KV{a + "attention.value_length", uint32(c.KVLoRA)},
		KV{a + "attention.key_length_mla", uint32(c.QKNope + c.QKRope)},
		KV{a + "attention.value_length_mla", uint32(c.VHead)},
		KV{a + "expert_feed_forward_length", uint32(c.MoEInter)},
		KV{a + "expert_count", uint32(c.RoutedExperts)},
		KV{a + "expert_shared_count", uint32(c.SharedExperts)},
		KV{a + "expert_weights_scale", float32(c.RoutedScale)},
	)
	if c.NormTopKProb {
		kvs = append(kvs, KV{a + "expert_weights_norm", true})
	}
	kvs = append(kvs, KV{a + "rope.dimension_count", uint32(c.QKRope)})
	if y := c.YaRN; y != nil {
		kvs = append(kvs,
			KV{a + "rope.scaling.type", "yarn"},
			KV{a + "rope.scaling.factor", float32(y.Factor)},
			KV{a + "rope.scaling.original_context_length", uint32(y.OrigMaxPos)},
			KV{a + "rope.scaling.yarn_beta_fast", float32(y.BetaFast)},
			KV{a + "rope.scaling.yarn_beta_slow", float32(y.BetaSlow)},
			// The converter writes 0.1 x mscale_all_dim and llama.cpp
			// divides by 0.1 again (TAG_DEEPSEEK2_YARN_LOG_MUL_FIX).
			KV{a + "rope.scaling.yarn_log_multiplier", float32(0.1 * y.MScaleAllDim)},
		)
	}
	tok, err := p.tokenizer()
	if err != nil {
		return nil, err
	}
	return append(kvs, tok...), nil
}

// tokenizer reads the tokenizer metadata: pre-tokenizer deepseek-v3 for
// V3/R1, deepseek-llm for V2 (the names the converter's hash check picks
// for DeepSeek's tokenizers).
func (p *ds2) tokenizer() ([]KV, error) {
	pre := "deepseek-v3"
	if p.cat.Config.Family == checkpoint.DeepSeekV2 {
		pre = "deepseek-llm"
	}
	return p.tok.get(p.cat, pre, p.cfg.Vocab)
}

// checkpointTokenizer reads a checkpoint's tokenizer.json and
// tokenizer_config.json as GGUF tokenizer metadata for a vocabulary of
// vocab tokens, which must be what the embedding and head hold.
func checkpointTokenizer(cat *checkpoint.Catalog, pre string, vocab int) ([]KV, error) {
	if err := cat.CheckVocab(vocab); err != nil {
		return nil, err
	}
	// The vocabulary comes parsed: trace/ parses the same file for its
	// prompts, and one parse serves both.
	v, err := cat.Vocab()
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("tokenizer.json: missing (llama.cpp needs the vocabulary)")
	}
	var tokConfig []byte
	if cat.HasFile("tokenizer_config.json") {
		if tokConfig, err = cat.ReadFile("tokenizer_config.json", tokenizer.MaxFileSize); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	kvs, notes, err := TokenizerKVs(v, tokConfig, pre, vocab, cat.Config.Raw)
	if len(notes) > 0 {
		slog.Warn("gguf/: tokenizer.json's added_tokens give ids that tokenizers (and so llama.cpp's converter) does not; gguf/ writes tokenizers' ids",
			"tokens", len(notes), "first", notes[0])
	}
	return kvs, err
}

// rawInt reads a positive integer of config.json.
func rawInt(raw map[string]any, key string) (int64, bool) {
	n, ok := raw[key].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := n.Int64()
	return v, err == nil && v > 0 && v <= 1<<32-1
}

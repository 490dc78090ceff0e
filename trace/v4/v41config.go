package v4

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Config41 is what the V4.1 forward needs on top of the V4 settings: the
// CSA2 sharing schedule, the candidate pool, the router's temperature and
// the Engram memory. Hugging Face's config.json nests the model under
// text_config with *_ids spellings; DeepSeek's inference/config.json uses
// ModelArgs' names, which win where both are given.
type Config41 struct {
	*Config
	KVSources    []int `json:"kv_source_layers"`
	IndexSources []int `json:"index_source_layers"`
	// CandidateSource is -1 when the model has no candidate pool.
	CandidateSource     int     `json:"candidate_source_layer"`
	CandidateTopKBlocks int     `json:"candidate_topk_blocks"`
	CandidateBlockSize  int     `json:"candidate_block_size"`
	GateTemp            float64 `json:"gate_temp"`
	NormTopKProb        bool    `json:"norm_topk_prob"`
	// FP8Block is the weight and activation quantisation block (32).
	FP8Block int `json:"fp8_block"`

	EngramLayers         []int `json:"engram_layer_ids"`
	EngramNumEmbeddings  []int `json:"engram_num_embeddings"`
	EngramMaxNgram       int   `json:"engram_max_ngram_size"`
	EngramVocab          int   `json:"engram_vocab_size"`
	EngramHeads          int   `json:"engram_n_heads"`
	EngramHeadDim        int   `json:"engram_head_dim"`
	EngramPadID          int   `json:"engram_pad_id"`
	EngramCompressedSize int   `json:"engram_compressed_vocab_size"`

	Roles []Role41 `json:"layer_roles"`
}

// The CSA2 roles of a V4.1 layer.
const (
	RoleSWA     = "swa"     // sliding window only (ratio 0)
	RoleFull    = "full"    // compresses its own KV (a kv source)
	RoleReindex = "reindex" // runs an indexer over another layer's index keys
	RoleReuse   = "reuse"   // attends over another layer's compressed KV and picks
)

// Role41 is one V4.1 layer's part in the shared attention state, derived
// from compress_ratios, kv_source_layers, index_source_layers,
// candidate_source_layer and engram_layer_ids as model.py derives it.
type Role41 struct {
	Layer           int    `json:"layer"`
	Ratio           int    `json:"compress_ratio"`
	Role            string `json:"role"`
	KVSource        bool   `json:"kv_source"`
	IndexSource     bool   `json:"index_source"`
	OwnsIndexK      bool   `json:"owns_index_k"`
	CandidateSource bool   `json:"candidate_source"`
	UsesCandidates  bool   `json:"uses_candidates"`
	Engram          bool   `json:"engram"`
	// ReadsCompressedKVOf and ReadsTopKOf name the layers whose shared
	// compressed KV and picks this layer attends over (-1: none).
	ReadsCompressedKVOf int `json:"reads_compressed_kv_of"`
	ReadsTopKOf         int `json:"reads_topk_of"`
}

// Describe says what the layer does in a few words.
func (r Role41) Describe() string {
	var s string
	switch r.Role {
	case RoleSWA:
		s = "sliding window only"
	case RoleFull:
		s = fmt.Sprintf("CSA2 full (ratio %d: own compressor and index keys)", r.Ratio)
	case RoleReindex:
		s = fmt.Sprintf("CSA2 reindex (ratio %d: own indexer over layer %d's keys)", r.Ratio, r.ReadsCompressedKVOf)
	default:
		s = fmt.Sprintf("CSA2 reuse (ratio %d: layer %d's picks)", r.Ratio, r.ReadsTopKOf)
	}
	if r.CandidateSource {
		s += ", candidate source"
	}
	if r.UsesCandidates && r.IndexSource {
		s += ", within the candidates"
	}
	if r.Engram {
		s += ", Engram"
	}
	return s
}

// v41Keys are the V4.1 keys in either spelling.
type v41Keys struct {
	KVSources        []int    `json:"kv_source_layers"`
	KVSourceIDs      []int    `json:"kv_source_layer_ids"`
	IndexSources     []int    `json:"index_source_layers"`
	IndexSourceIDs   []int    `json:"index_source_layer_ids"`
	CandidateSource  *int     `json:"candidate_source_layer"`
	CandidateID      *int     `json:"candidate_source_layer_id"`
	CandidateBlocks  *int     `json:"candidate_topk_blocks"`
	CandidateBlock   *int     `json:"candidate_block_size"`
	GateTemp         *float64 `json:"gate_temp"`
	NormTopKProb     *bool    `json:"norm_topk_prob"`
	EngramLayers     []int    `json:"engram_layer_ids"`
	EngramNum        []int    `json:"engram_num_embeddings"`
	EngramMaxNgram   *int     `json:"engram_max_ngram_size"`
	EngramVocab      *int     `json:"engram_vocab_size"`
	EngramHeads      *int     `json:"engram_n_heads"`
	EngramHeadDim    *int     `json:"engram_head_dim"`
	EngramPadID      *int     `json:"engram_pad_id"`
	EngramPadTokenID *int     `json:"engram_pad_token_id"`
	EngramCompressed *int     `json:"engram_compressed_vocab_size"`
	Quantization     *struct {
		WeightBlockSize []int `json:"weight_block_size"`
	} `json:"quantization_config"`
}

// ParseConfig41 reads a V4.1 config.json (hf; the model under
// text_config, or at the top level) and, when not nil, DeepSeek's
// inference/config.json (args), and derives every layer's role.
func ParseConfig41(hf, args []byte) (*Config41, error) {
	var top struct {
		v41Keys
		ModelType  *string         `json:"model_type"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(hf, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	text := hf
	var tk v41Keys
	if len(top.TextConfig) > 0 {
		text = top.TextConfig
		if err := json.Unmarshal(text, &tk); err != nil {
			return nil, fmt.Errorf("config.json: text_config: %w", err)
		}
	}
	var a v41Keys
	if args != nil {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fmt.Errorf("inference/config.json: %w", err)
		}
	}
	base, err := parseConfig(text, args)
	if err != nil {
		return nil, err
	}
	if top.ModelType != nil {
		base.ModelType = *top.ModelType
	}
	c := &Config41{Config: base, CandidateSource: -1, GateTemp: 1, NormTopKProb: true, FP8Block: 32, EngramPadID: 2}
	// Inference keys first, then text_config, then the top level.
	all := []*v41Keys{&a, &tk, &top.v41Keys}
	ints := func(get func(k *v41Keys) []int) []int {
		for _, k := range all {
			if v := get(k); v != nil {
				return v
			}
		}
		return nil
	}
	one := func(dst *int, get func(k *v41Keys) *int) {
		for _, k := range all {
			if v := get(k); v != nil {
				*dst = *v
				return
			}
		}
	}
	c.KVSources = ints(func(k *v41Keys) []int { return firstInts(k.KVSources, k.KVSourceIDs) })
	c.IndexSources = ints(func(k *v41Keys) []int { return firstInts(k.IndexSources, k.IndexSourceIDs) })
	c.EngramLayers = ints(func(k *v41Keys) []int { return k.EngramLayers })
	c.EngramNumEmbeddings = ints(func(k *v41Keys) []int { return k.EngramNum })
	one(&c.CandidateSource, func(k *v41Keys) *int { return firstInt(k.CandidateSource, k.CandidateID) })
	one(&c.CandidateTopKBlocks, func(k *v41Keys) *int { return k.CandidateBlocks })
	one(&c.CandidateBlockSize, func(k *v41Keys) *int { return k.CandidateBlock })
	one(&c.EngramMaxNgram, func(k *v41Keys) *int { return k.EngramMaxNgram })
	one(&c.EngramVocab, func(k *v41Keys) *int { return k.EngramVocab })
	one(&c.EngramHeads, func(k *v41Keys) *int { return k.EngramHeads })
	one(&c.EngramHeadDim, func(k *v41Keys) *int { return k.EngramHeadDim })
	one(&c.EngramPadID, func(k *v41Keys) *int { return firstInt(k.EngramPadID, k.EngramPadTokenID) })
	one(&c.EngramCompressedSize, func(k *v41Keys) *int { return k.EngramCompressed })
	for _, k := range all {
		if k.GateTemp != nil {
			c.GateTemp = *k.GateTemp
			break
		}
	}
	for _, k := range all {
		if k.NormTopKProb != nil {
			c.NormTopKProb = *k.NormTopKProb
			break
		}
	}
	for _, k := range all {
		if q := k.Quantization; q != nil && len(q.WeightBlockSize) == 2 {
			if q.WeightBlockSize[0] != q.WeightBlockSize[1] || q.WeightBlockSize[0] <= 0 {
				return nil, fmt.Errorf("config.json: quantization_config.weight_block_size %v is not square", q.WeightBlockSize)
			}
			c.FP8Block = q.WeightBlockSize[0]
			break
		}
	}
	if err := c.validate41(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

func firstInts(a, b []int) []int {
	if a != nil {
		return a
	}
	return b
}

func firstInt(a, b *int) *int {
	if a != nil {
		return a
	}
	return b
}

// validate41 checks the settings and derives the roles, refusing a
// schedule in which a layer would read shared state nobody wrote.
func (c *Config41) validate41() error {
	if err := c.validateShared(); err != nil {
		return err
	}
	switch {
	case c.HeadDim%c.FP8Block != 0:
		return fmt.Errorf("head_dim %d is not a multiple of the FP8 block %d (the window KV fake-quant)", c.HeadDim, c.FP8Block)
	case c.HeadDim%16 != 0:
		return fmt.Errorf("head_dim %d is not a multiple of 16 (the compressed KV's FP4 groups)", c.HeadDim)
	case c.IndexDim%32 != 0 || c.IndexDim <= c.RopeDim:
		return fmt.Errorf("index_head_dim %d must be a multiple of 32 and above qk_rope_head_dim", c.IndexDim)
	case c.HashLayers != 0:
		return fmt.Errorf("num_hash_layers %d: V4.1 has no hash routing", c.HashLayers)
	case c.GateTemp <= 0:
		return fmt.Errorf("gate_temp %g must be positive", c.GateTemp)
	}
	in := func(s []int, l int) bool { return slices.Contains(s, l) }
	for _, s := range [][]int{c.KVSources, c.IndexSources, c.EngramLayers} {
		for _, l := range s {
			if l < 0 || l >= c.Layers {
				return fmt.Errorf("layer %d in a source or Engram list is outside [0, %d)", l, c.Layers)
			}
		}
	}
	c.Roles = make([]Role41, c.Layers)
	kvOf, topkOf := -1, -1
	for l := range c.Layers {
		r := Role41{Layer: l, Ratio: c.Ratio(l), ReadsCompressedKVOf: -1, ReadsTopKOf: -1, Engram: in(c.EngramLayers, l)}
		if r.Ratio > 0 {
			r.KVSource, r.IndexSource = in(c.KVSources, l), in(c.IndexSources, l)
			if r.KVSource {
				kvOf = l
			}
			if r.IndexSource {
				topkOf = l
			}
			r.OwnsIndexK = r.KVSource && r.IndexSource
			r.CandidateSource = l == c.CandidateSource
			r.UsesCandidates = c.CandidateSource >= 0 && c.CandidateSource < l
			r.ReadsCompressedKVOf, r.ReadsTopKOf = kvOf, topkOf
			switch {
			case r.KVSource:
				r.Role = RoleFull
			case r.IndexSource:
				r.Role = RoleReindex
			default:
				r.Role = RoleReuse
			}
			switch {
			case kvOf < 0:
				return fmt.Errorf("layer %d (ratio %d) reads a compressed KV, but no kv source precedes it", l, r.Ratio)
			case topkOf < 0:
				return fmt.Errorf("layer %d (ratio %d) reads compressed picks, but no index source precedes it", l, r.Ratio)
			case c.Ratio(kvOf) != r.Ratio || c.Ratio(topkOf) != r.Ratio:
				return fmt.Errorf("layer %d has ratio %d but reads layers %d and %d of ratio %d and %d", l, r.Ratio, kvOf, topkOf, c.Ratio(kvOf), c.Ratio(topkOf))
			case r.CandidateSource && !r.IndexSource:
				return fmt.Errorf("candidate_source_layer %d is not an index source", l)
			}
		} else {
			r.Role = RoleSWA
			switch {
			case in(c.KVSources, l) || in(c.IndexSources, l):
				return fmt.Errorf("layer %d is a kv or index source but has compress ratio 0", l)
			case l == c.CandidateSource:
				return fmt.Errorf("candidate_source_layer %d has compress ratio 0", l)
			}
		}
		c.Roles[l] = r
	}
	if c.CandidateSource >= 0 && (c.CandidateTopKBlocks <= 0 || c.CandidateBlockSize <= 0) {
		return fmt.Errorf("candidate_source_layer %d needs positive candidate_topk_blocks and candidate_block_size", c.CandidateSource)
	}
	if len(c.EngramLayers) > 0 {
		switch {
		case len(c.EngramNumEmbeddings) != len(c.EngramLayers):
			return fmt.Errorf("engram_num_embeddings has %d entries for %d Engram layers", len(c.EngramNumEmbeddings), len(c.EngramLayers))
		case c.EngramMaxNgram < 2 || c.EngramHeads <= 0 || c.EngramHeadDim <= 0 || c.EngramVocab <= 1 || c.EngramCompressedSize <= 0:
			return fmt.Errorf("Engram needs engram_max_ngram_size >= 2 and positive engram_n_heads, engram_head_dim, engram_vocab_size and engram_compressed_vocab_size")
		case c.EngramHeadDim%c.FP8Block != 0:
			return fmt.Errorf("engram_head_dim %d is not a multiple of the FP8 block %d", c.EngramHeadDim, c.FP8Block)
		case c.EngramPadID < 0 || c.EngramPadID >= c.Vocab:
			return fmt.Errorf("engram_pad_id %d is outside the vocabulary", c.EngramPadID)
		}
	}
	return nil
}

// Role is layer l's description (for trace.json and ERROR.txt).
func (c *Config41) Role(l int) string { return c.Roles[l].Describe() }

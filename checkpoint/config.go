package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Config is what the views need from config.json, with the whole object
// in Raw. Each typed field is read from the top level, else from
// text_config (where multimodal checkpoints nest the language model's
// settings), else from DeepSeek's inference/config.json (ModelArgs'
// spellings: dim, n_layers, ...); a field that is absent stays zero.
type Config struct {
	// Raw is the whole object with numbers as json.Number, so that
	// re-encoding keeps their text. Nil when config.json is absent or is
	// not a JSON object.
	Raw map[string]any
	// Inference is inference/config.json, read like Raw; nil when absent.
	Inference map[string]any

	// Family is the model family the config describes (see Family): the
	// one reading of model_type, the V4 and V4.1 keys and the text_config
	// nesting that every package asks.
	Family        Family
	ModelType     string   // model_type
	Architectures []string // architectures
	NumLayers     int      // num_hidden_layers, or n_layers
	HiddenSize    int      // hidden_size, or dim
	RoutedExperts int      // n_routed_experts
	MTPLayers     int      // num_nextn_predict_layers, or n_mtp_layers
	VocabSize     int      // vocab_size
	TorchDType    string   // torch_dtype, or dtype (newer transformers)
	Quant         QuantConfig
}

// QuantConfig is config.json's quantization_config; zero when absent.
type QuantConfig struct {
	Method          string   // quant_method
	WeightBlockSize [2]int64 // weight_block_size [rows, cols]; zero when absent
	ScaleFmt        string   // scale_fmt
	// ExpertDType is expert_dtype ("fp4" for MXFP4 experts), read from
	// quantization_config or, as DeepSeek-V4 writes it, the top level.
	ExpertDType string
}

// ParseConfig parses config.json. A file that is not a JSON object
// gives an empty Config and an error; a field of the wrong type is left
// zero, the others are read, and the error (errors.Join of one error per
// field) says which.
func ParseConfig(data []byte) (*Config, error) {
	c, errs := parseConfig(data)
	return c, errors.Join(errs...)
}

func parseConfig(data []byte) (*Config, []error) {
	return parseConfigs(data, nil)
}

// parseConfigs parses config.json and, when inference is not nil,
// inference/config.json, which fills what config.json leaves unset. Each
// count and the expert dtype they both give must agree: an error names
// each difference.
func parseConfigs(data, inference []byte) (*Config, []error) {
	c := &Config{}
	raw, err := decodeObject(data)
	if err != nil {
		if data != nil || inference == nil {
			return c, []error{err}
		}
		raw = map[string]any{}
	}
	c.Raw = raw
	if data == nil {
		c.Raw = nil
	}
	r := fieldReader{scopes: []map[string]any{raw}}
	if tc, ok := raw["text_config"].(map[string]any); ok {
		r.scopes = append(r.scopes, tc)
	}
	var inf fieldReader
	if inference != nil {
		args, err := decodeObject(inference)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: %w", InferenceConfigName, err))
		} else {
			c.Inference = args
			r.scopes = append(r.scopes, args)
			inf = fieldReader{scopes: []map[string]any{args}, prefix: InferenceConfigName + ": "}
		}
	}
	c.ModelType = r.str("model_type")
	c.Architectures = r.strs("architectures")
	c.Family = familyOf(r.scopes)
	c.NumLayers = r.count("num_hidden_layers", "n_layers")
	c.HiddenSize = r.count("hidden_size", "dim")
	c.RoutedExperts = r.count("n_routed_experts")
	c.MTPLayers = r.count("num_nextn_predict_layers", "n_mtp_layers")
	c.VocabSize = r.count("vocab_size")
	c.TorchDType = r.str("torch_dtype", "dtype")
	if key, v := r.find("quantization_config"); v != nil {
		q, ok := v.(map[string]any)
		if !ok {
			r.fail(key, "an object", v)
		} else {
			qr := fieldReader{scopes: []map[string]any{q}, prefix: key + "."}
			c.Quant.Method = qr.str("quant_method")
			c.Quant.WeightBlockSize = qr.block("weight_block_size")
			c.Quant.ScaleFmt = qr.str("scale_fmt")
			c.Quant.ExpertDType = qr.str("expert_dtype")
			r.errs = append(r.errs, qr.errs...)
		}
	}
	if c.Quant.ExpertDType == "" {
		c.Quant.ExpertDType = r.str("expert_dtype")
	}
	if c.Inference != nil {
		r.errs = append(r.errs, disagreements(c, &inf)...)
	}
	return c, r.errs
}

// disagreements compares what inference/config.json says with what the
// catalog read (config.json first): DeepSeek's reference code builds the
// model from the one, Hugging Face loaders from the other.
func disagreements(c *Config, inf *fieldReader) []error {
	var errs []error
	for _, d := range []struct {
		key  string
		have int
	}{{"n_layers", c.NumLayers}, {"dim", c.HiddenSize}, {"n_routed_experts", c.RoutedExperts}, {"n_mtp_layers", c.MTPLayers}} {
		if v := inf.count(d.key); v != 0 && v != d.have {
			errs = append(errs, fmt.Errorf("%s: %s %d, but config.json says %d", InferenceConfigName, d.key, v, d.have))
		}
	}
	if v := inf.str("expert_dtype"); v != "" && v != c.Quant.ExpertDType {
		errs = append(errs, fmt.Errorf("%s: expert_dtype %q, but config.json says %q", InferenceConfigName, v, c.Quant.ExpertDType))
	}
	return append(errs, inf.errs...)
}

// checkCounts compares the counts config.json gives with the tensors the
// headers hold, so that no consumer trusts a count the checkpoint does not
// back (a hostile config may claim 10^9 layers): each count past what the
// tensors show is one problem. Fewer than the config says is allowed only
// where the tensors say nothing (no layers, experts or MTP blocks at all
// is a checkpoint of another kind, not a short one).
func checkCounts(cfg *Config, ts []*Tensor, problem func(file, tensor, reason string)) {
	layers, experts, mtp := -1, -1, -1
	for _, t := range ts {
		if t.MTP < 0 {
			layers = max(layers, t.Layer)
		}
		if t.Role == RoleRoutedExpert {
			experts = max(experts, t.Expert)
		}
		mtp = max(mtp, t.MTP)
	}
	for _, c := range []struct {
		key        string
		want, have int
		what       string
	}{
		{"num_hidden_layers", cfg.NumLayers, layers + 1, "layers"},
		{"n_routed_experts", cfg.RoutedExperts, experts + 1, "routed experts"},
		{"num_nextn_predict_layers", cfg.MTPLayers, mtp + 1, "MTP blocks"},
	} {
		if c.have > 0 && c.want > c.have {
			problem(ConfigName, "", fmt.Sprintf("%s %d, but the shards hold tensors for %d %s", c.key, c.want, c.have, c.what))
		}
	}
	if cfg.VocabSize > 0 {
		if err := vocabFits(cfg.VocabSize, ts); err != nil {
			problem(ConfigName, "", err.Error())
		}
	}
}

// Family is a model family dsfs tells apart: the engines of trace/, the
// recipes of gguf/ and the views choose by it.
type Family string

// The families. A config of none of them (FamilyOther) may still be a
// DeepSeek model written as DeepSeek's ModelArgs (no model_type), which
// the V2/V3 engine reads.
const (
	FamilyOther Family = ""
	DeepSeekV2  Family = "deepseek_v2"  // DeepSeek-V2, V2-Lite
	DeepSeekV3  Family = "deepseek_v3"  // DeepSeek-V3, R1 and their versions
	DeepSeekV4  Family = "deepseek_v4"  // DeepSeek-V4-Flash
	DeepSeekV41 Family = "deepseek_v41" // DeepSeek-V4.1-Flash (its model under text_config)
)

// familyOf reads the family from config.json's scopes (the top level,
// then text_config, then inference/config.json): model_type deepseek_v41*
// or the V4.1 attention keys (kv_source_layer_ids or kv_source_layers)
// beside hc_mult is V4.1; model_type deepseek_v4*, hc_mult or
// compress_ratios is V4 (the engine then says what of the V4 family it
// cannot run); model_type deepseek_v3* or deepseek_v2* is V3 or V2.
func familyOf(scopes []map[string]any) Family {
	var mt string
	var v4, v41 bool
	for _, m := range scopes {
		if s, ok := m["model_type"].(string); ok && mt == "" {
			mt = s
		}
		_, hasHC := m["hc_mult"]
		_, hasRatios := m["compress_ratios"]
		_, kvIDs := m["kv_source_layer_ids"]
		_, kv := m["kv_source_layers"]
		v4 = v4 || hasHC || hasRatios
		v41 = v41 || hasHC && (kvIDs || kv)
		if s, ok := m["model_type"].(string); ok && strings.HasPrefix(s, "deepseek_v41") {
			v41 = true
		}
	}
	switch {
	case v41:
		return DeepSeekV41
	case v4 || strings.HasPrefix(mt, "deepseek_v4"):
		return DeepSeekV4
	case strings.HasPrefix(mt, "deepseek_v3"):
		return DeepSeekV3
	case strings.HasPrefix(mt, "deepseek_v2"):
		return DeepSeekV2
	}
	return FamilyOther
}

// MaxVocab bounds a vocabulary size: sixteen times DeepSeek-V3's 129,280
// tokens, eight times the largest tokenizer published (262k), and a
// token list gguf/ can hold in memory (two million strings).
const MaxVocab = 1 << 21

// CheckVocab returns an error naming config.json and n unless n, a
// vocabulary size read from it, is positive, at most MaxVocab and equal
// to the rows of every embedding table and output head the checkpoint
// holds (its two-dimensional tensors of RoleEmbed and RoleHead, the MTP
// blocks' included). Whoever sizes something by the vocabulary (gguf/'s
// token list, trace/'s embedding lookups) calls it first, so the size
// comes from what exists, not from what a config claims.
func (c *Catalog) CheckVocab(n int) error {
	if err := vocabFits(n, c.Tensors); err != nil {
		return fmt.Errorf("%s: %w", ConfigName, err)
	}
	return nil
}

func vocabFits(n int, ts []*Tensor) error {
	if n <= 0 || n > MaxVocab {
		return fmt.Errorf("vocab_size %d is outside 1-%d", n, MaxVocab)
	}
	for _, t := range ts {
		if (t.Role == RoleEmbed || t.Role == RoleHead) && len(t.Shape) == 2 && t.Shape[0] != int64(n) {
			return fmt.Errorf("vocab_size %d, but %s has %d rows", n, t.Name, t.Shape[0])
		}
	}
	return nil
}

// decodeObject decodes a JSON object with numbers kept as json.Number.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if m == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not a JSON object: trailing data after the object")
	}
	return m, nil
}

// fieldReader reads typed fields from the first scope that has them and
// collects an error per field of the wrong type.
type fieldReader struct {
	scopes []map[string]any
	prefix string // for messages: the path of the object read
	errs   []error
}

// find returns the first of keys present (and not null) in the first
// scope that has one.
func (r *fieldReader) find(keys ...string) (string, any) {
	for _, m := range r.scopes {
		for _, k := range keys {
			if v := m[k]; v != nil {
				return k, v
			}
		}
	}
	return "", nil
}

func (r *fieldReader) fail(key, want string, v any) {
	r.errs = append(r.errs, fmt.Errorf("%s%s: want %s, got %s", r.prefix, key, want, jsonText(v)))
}

func (r *fieldReader) str(keys ...string) string {
	key, v := r.find(keys...)
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.fail(key, "a string", v)
	}
	return s
}

func (r *fieldReader) strs(keys ...string) []string {
	key, v := r.find(keys...)
	if v == nil {
		return nil
	}
	a, ok := v.([]any)
	out := make([]string, 0, len(a))
	for _, e := range a {
		s, isStr := e.(string)
		ok = ok && isStr
		out = append(out, s)
	}
	if !ok {
		r.fail(key, "a list of strings", v)
		return nil
	}
	return out
}

// count reads a non-negative integer.
func (r *fieldReader) count(keys ...string) int {
	key, v := r.find(keys...)
	if v == nil {
		return 0
	}
	n, ok := nonNegInt(v)
	if !ok {
		r.fail(key, "a non-negative integer", v)
	}
	return n
}

// block reads a [rows, cols] pair of positive integers.
func (r *fieldReader) block(keys ...string) [2]int64 {
	key, v := r.find(keys...)
	if v == nil {
		return [2]int64{}
	}
	a, _ := v.([]any)
	if len(a) == 2 {
		rows, ok1 := nonNegInt(a[0])
		cols, ok2 := nonNegInt(a[1])
		if ok1 && ok2 && rows > 0 && cols > 0 {
			return [2]int64{int64(rows), int64(cols)}
		}
	}
	r.fail(key, "two positive integers", v)
	return [2]int64{}
}

// nonNegInt accepts a JSON integer (no fraction, no exponent) that fits an int.
func nonNegInt(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 0)
	if err != nil || i < 0 {
		return 0, false
	}
	return int(i), true
}

// PatchConfig returns config.json data with the key at path (nested
// objects, created where missing) set to value, written as transformers
// writes a config: two-space indent, keys sorted (Go sorts map keys, and
// transformers' to_json_string passes sort_keys=True), a final newline, no
// HTML escaping. Unlike Python it writes non-ASCII text as UTF-8 rather
// than \u escapes. Numbers keep their text. The output depends only on the
// input, path and value.
func PatchConfig(data []byte, path []string, value any) ([]byte, error) {
	if len(path) == 0 {
		return nil, errors.New("patching config.json: empty key path")
	}
	root, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("patching config.json: %w", err)
	}
	m := root
	for i, k := range path[:len(path)-1] {
		switch next := m[k].(type) {
		case map[string]any:
			m = next
		case nil:
			child := make(map[string]any)
			m[k] = child
			m = child
		default:
			return nil, fmt.Errorf("patching config.json: %s is %s, not an object",
				strings.Join(path[:i+1], "."), jsonText(next))
		}
	}
	// The value goes in as JSON would read it back, so that a struct's
	// fields are sorted like every other key: otherwise the bytes would
	// depend on whether a later patch decoded and re-encoded them.
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("patching config.json: %s: %w", strings.Join(path, "."), err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("patching config.json: %s: %w", strings.Join(path, "."), err)
	}
	m[path[len(path)-1]] = v
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("patching config.json: %w", err)
	}
	return buf.Bytes(), nil
}

// QuantPatch is the config.json patch (PatchConfig's key path, dotted, and
// its value) that records a conversion as quantization_config.KEY = value:
// nil when nothing was converted or config.json has no top-level
// quantization_config naming its quant_method, and config.json then stays
// as it is. Loaders (transformers' AutoQuantizationConfig, vLLM) dispatch
// on quant_method, so a quantization_config without one, or one claiming a
// conversion that did not happen, would break or mislead them.
func (c *Config) QuantPatch(converted int, key, value string) map[string]any {
	q, _ := c.Raw["quantization_config"].(map[string]any)
	if method, _ := q["quant_method"].(string); converted == 0 || method == "" {
		return nil
	}
	return map[string]any{"quantization_config." + key: value}
}

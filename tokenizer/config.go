package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// LoadConfig reads a tokenizer_config.json file; see ParseConfig.
func (t *Tokenizer) LoadConfig(path string) error {
	data, err := readFile(path)
	if err != nil {
		return err
	}
	if err := t.ParseConfig(data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ParseConfig applies the special-token settings of a tokenizer_config.json
// to what Encode adds, as transformers' LlamaTokenizerFast (the class
// DeepSeek's configs name) rebuilds its post-processor: BOS first when
// add_bos_token, EOS last when add_eos_token. A Llama tokenizer class
// defaults them to true and false; for another class without either field
// the tokenizer.json post-processor stays in charge. bos_token and
// eos_token may be a string or an AddedToken object ({"content": ...}).
func (t *Tokenizer) ParseConfig(data []byte) error {
	var c struct {
		AddBOS *bool           `json:"add_bos_token"`
		AddEOS *bool           `json:"add_eos_token"`
		BOS    json.RawMessage `json:"bos_token"`
		EOS    json.RawMessage `json:"eos_token"`
		Class  string          `json:"tokenizer_class"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	llama := strings.HasPrefix(c.Class, "LlamaTokenizer")
	if c.AddBOS == nil && c.AddEOS == nil && !llama {
		return nil
	}
	addBOS := llama
	if c.AddBOS != nil {
		addBOS = *c.AddBOS
	}
	addEOS := c.AddEOS != nil && *c.AddEOS
	var prefix, suffix []int
	if addBOS {
		id, err := t.configToken("bos_token", c.BOS)
		if err != nil {
			return err
		}
		prefix = []int{id}
	}
	if addEOS {
		id, err := t.configToken("eos_token", c.EOS)
		if err != nil {
			return err
		}
		suffix = []int{id}
	}
	t.prefix, t.suffix = prefix, suffix
	return nil
}

// configToken resolves a special-token field of tokenizer_config.json.
func (t *Tokenizer) configToken(field string, raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return 0, fmt.Errorf("%s is needed but not set", field)
	}
	var content string
	if err := json.Unmarshal(raw, &content); err != nil {
		var obj struct{ Content *string }
		if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
			return 0, fmt.Errorf("%s must be a string or an object with content", field)
		}
		content = *obj.Content
	}
	id, ok := t.TokenID(content)
	if !ok {
		return 0, fmt.Errorf("%s %q is not a token", field, content)
	}
	return id, nil
}

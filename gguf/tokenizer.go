package gguf

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Token types of tokenizer.ggml.token_type (llama_token_type).
const (
	tokenNormal      = 1
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
)

// maxTokenizerFile bounds tokenizer.json and tokenizer_config.json, as the
// catalog bounds them.
const maxTokenizerFile = 64 << 20

// readBounded reads a small checkpoint file, refusing one over max bytes
// by its size before reading it.
func readBounded(path string, max int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%d bytes, more than the %d allowed", st.Size(), max)
	}
	return os.ReadFile(path)
}

// tokenizerJSON is what the metadata needs of a byte-level BPE
// tokenizer.json.
type tokenizerJSON struct {
	Model struct {
		Type   string            `json:"type"`
		Vocab  map[string]int    `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
}

// TokenizerKVs is the tokenizer.* metadata of a byte-level BPE tokenizer
// as convert_hf_to_gguf.py writes it for DeepSeek: model gpt2, the
// pre-tokenizer name pre, vocabSize tokens in tokenizer.json's byte-level
// spelling (holes [PADi], UNUSED), their types (added special tokens
// CONTROL, other added tokens USER_DEFINED), the merges as "a b", the
// special ids and add_bos/add_eos flags from tokenizer_config.json (ids
// from config.json when it names none) and the chat template.
func TokenizerKVs(tokJSON, tokConfig []byte, pre string, vocabSize int, cfg map[string]any) ([]KV, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(tokJSON, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model type %q, not BPE", tj.Model.Type)
	}
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	set := make([]bool, vocabSize)
	for tok, id := range tj.Model.Vocab {
		if id < 0 || id >= vocabSize {
			return nil, fmt.Errorf("tokenizer.json: token %q has id %d outside the vocabulary of %d", tok, id, vocabSize)
		}
		tokens[id], types[id], set[id] = tok, tokenNormal, true
	}
	byContent := make(map[string]int)
	for tok, id := range tj.Model.Vocab {
		byContent[tok] = id
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= vocabSize {
			return nil, fmt.Errorf("tokenizer.json: added token %q has id %d outside the vocabulary of %d", a.Content, a.ID, vocabSize)
		}
		tokens[a.ID], set[a.ID] = a.Content, true
		types[a.ID] = tokenUserDefined
		if a.Special || looksSpecial(a.Content) {
			types[a.ID] = tokenControl
		}
		byContent[a.Content] = a.ID
	}
	for i := range tokens {
		if !set[i] {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokenUnused
		}
	}
	merges := make([]string, 0, len(tj.Model.Merges))
	for i, m := range tj.Model.Merges {
		var s string
		if json.Unmarshal(m, &s) == nil {
			merges = append(merges, s)
			continue
		}
		var pair []string
		if err := json.Unmarshal(m, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("tokenizer.json: merge %d is neither \"a b\" nor [a, b]", i)
		}
		merges = append(merges, pair[0]+" "+pair[1])
	}
	if len(merges) == 0 {
		return nil, fmt.Errorf("tokenizer.json: no merges (llama.cpp's gpt2 tokenizer needs them)")
	}
	kvs := []KV{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", pre},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
	}
	var tc map[string]any
	if tokConfig != nil {
		if err := json.Unmarshal(tokConfig, &tc); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	for _, sp := range []struct{ name, key, cfgKey string }{
		{"bos_token", "tokenizer.ggml.bos_token_id", "bos_token_id"},
		{"eos_token", "tokenizer.ggml.eos_token_id", "eos_token_id"},
		{"pad_token", "tokenizer.ggml.padding_token_id", "pad_token_id"},
	} {
		if id, ok := specialID(tc[sp.name], byContent); ok {
			kvs = append(kvs, KV{sp.key, uint32(id)})
		} else if f, ok := cfg[sp.cfgKey].(json.Number); ok {
			if id, err := f.Int64(); err == nil && id >= 0 && id < int64(vocabSize) {
				kvs = append(kvs, KV{sp.key, uint32(id)})
			}
		}
	}
	for _, k := range []string{"add_bos_token", "add_eos_token"} {
		if b, ok := tc[k].(bool); ok {
			kvs = append(kvs, KV{"tokenizer.ggml." + k, b})
		}
	}
	if t, ok := tc["chat_template"].(string); ok {
		kvs = append(kvs, KV{"tokenizer.chat_template", t})
	}
	return kvs, nil
}

// specialID finds the id of a tokenizer_config.json special token, given
// as a string or as an AddedToken object with a content.
func specialID(v any, byContent map[string]int) (int, bool) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case map[string]any:
		s, _ = v["content"].(string)
	}
	if s == "" {
		return 0, false
	}
	id, ok := byContent[s]
	return id, ok
}

// looksSpecial is gguf-py's does_token_look_special: <|...|>, <｜...｜>
// <unused...> and a few literal markers.
func looksSpecial(tok string) bool {
	switch tok {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return (strings.HasPrefix(tok, "<|") && strings.HasSuffix(tok, "|>")) ||
		(strings.HasPrefix(tok, "<｜") && strings.HasSuffix(tok, "｜>")) ||
		(strings.HasPrefix(tok, "<unused") && strings.HasSuffix(tok, ">"))
}

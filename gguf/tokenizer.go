package gguf

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
)

// Token types of tokenizer.ggml.token_type (llama_token_type).
const (
	tokenNormal      = 1
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
)

// TokenizerKVs is the tokenizer.* metadata of a byte-level BPE tokenizer
// as convert_hf_to_gguf.py writes it for DeepSeek: model gpt2, the
// pre-tokenizer name pre, vocabSize tokens in tokenizer.json's byte-level
// spelling (holes [PADi], UNUSED), their types (added special tokens
// CONTROL, other added tokens USER_DEFINED), the merges as "a b", the
// special ids and add_bos/add_eos flags from tokenizer_config.json (ids
// from config.json when it names none) and the chat template. Ids are the
// ones transformers gives the converter (tokenizer.Vocab's rule), so the
// same file always gives the same bytes and no spelling is written twice;
// notes lists where they differ from the file's added_tokens. v is
// tokenizer.json's vocabulary (checkpoint.Catalog.Vocab); vocabSize must be
// at most checkpoint.MaxVocab.
func TokenizerKVs(v *tokenizer.Vocab, tokConfig []byte, pre string, vocabSize int, cfg map[string]any) (kvs []KV, notes []string, err error) {
	if vocabSize <= 0 || vocabSize > checkpoint.MaxVocab {
		return nil, nil, fmt.Errorf("vocabulary of %d tokens: outside 1-%d", vocabSize, checkpoint.MaxVocab)
	}
	if n := len(v.Tokens); n > vocabSize {
		return nil, nil, fmt.Errorf("tokenizer.json: token %q has id %d outside the vocabulary of %d", v.Tokens[n-1], n-1, vocabSize)
	}
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	for id := range tokens {
		if v.Has(id) {
			tokens[id], types[id] = v.Tokens[id], tokenNormal
		} else {
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), tokenUnused
		}
	}
	for _, a := range v.Added {
		types[a.ID] = tokenUserDefined
		if a.Special || looksSpecial(a.Content) {
			types[a.ID] = tokenControl
		}
	}
	merges := make([]string, len(v.Merges))
	for i, m := range v.Merges {
		merges[i] = m[0] + " " + m[1]
	}
	if len(merges) == 0 {
		return nil, nil, fmt.Errorf("tokenizer.json: no merges (llama.cpp's gpt2 tokenizer needs them)")
	}
	kvs = []KV{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", pre},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
	}
	var tc map[string]any
	if tokConfig != nil {
		if err := json.Unmarshal(tokConfig, &tc); err != nil {
			return nil, nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	for _, sp := range []struct{ name, key, cfgKey string }{
		{"bos_token", "tokenizer.ggml.bos_token_id", "bos_token_id"},
		{"eos_token", "tokenizer.ggml.eos_token_id", "eos_token_id"},
		{"pad_token", "tokenizer.ggml.padding_token_id", "pad_token_id"},
	} {
		if id, ok := specialID(tc[sp.name], v); ok {
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
	return kvs, v.Notes(), nil
}

// specialID finds the id of a tokenizer_config.json special token, given
// as a string or as an AddedToken object with a content.
func specialID(v any, vocab *tokenizer.Vocab) (int, bool) {
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
	return vocab.ID(s)
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

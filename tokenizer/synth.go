package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The special tokens of a synthesized tokenizer, at ids 0, 1 and 2 both in
// the BPE vocabulary and in added_tokens, where DeepSeek-V3 puts them.
const (
	synthBOS = "<｜begin▁of▁sentence｜>"
	synthEOS = "<｜end▁of▁sentence｜>"
	synthPad = "<｜▁pad▁｜>"
)

var synthSpecials = [...]string{synthBOS, synthEOS, synthPad}

// synthSample is the text Synthesize learns merges from: prose, Chinese and
// Japanese, code with tabs, indentation and blank lines, numbers, and
// symbols, so that the merges exercise every pre-tokenizer branch.
const synthSample = `The quick brown fox jumps over the lazy dog. The dog, however, was not lazy at all;
it was thinking about the theory of mixtures of experts, and whether the router
would send the next token to expert 17 or to expert 203. "Isn't it obvious?" the fox asked.
"It's never obvious," said the dog. "We'll see what the gate says."

In 2024 the model had 671 billion parameters, of which 37 billion were active per token.
A block of 128 values shares one scale; 3.14159 is not 22/7, and 1,000,000 is a million.
Phone: +1 (555) 010-9999. Version v3.2.1, build #4521, commit 9b4e9788.

深度学习模型的推理需要大量的计算资源。我们把专家权重量化为四位，然后在读取时解码。
这个文件系统在读取时才计算数据块，没有读取的部分永远不会被计算。中文文本没有空格，
所以分词器把连续的汉字当作一个整体，再交给字节级的合并规则。
日本語のテキストも同じように扱われます。カタカナとひらがなは漢字と一緒に分けられます。
東京で会議があります。トークナイザーはとても大切です。

package main

import (
	"fmt"
	"strings"
)

// Expert is one routed expert of a mixture-of-experts layer.
type Expert struct {
	ID     int
	Weight []float32
	Scale  float32
}

func (e *Expert) Forward(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = v * e.Weight[i] * e.Scale
	}
	return out
}

func main() {
	names := []string{"gate", "up", "down"}
	fmt.Println(strings.Join(names, ", "))
}

def softmax(logits, temperature=1.0):
    """Return the softmax of logits divided by temperature."""
    scaled = [x / temperature for x in logits]
    top = max(scaled)
    exps = [math.exp(x - top) for x in scaled]
    total = sum(exps)
    return [x / total for x in exps]


class Router:
    def __init__(self, n_experts, top_k=8):
        self.n_experts = n_experts
        self.top_k = top_k

    def route(self, scores):
        ranked = sorted(range(self.n_experts), key=lambda i: -scores[i])
        return ranked[: self.top_k]

if (x >= 0 && y <= 10) { z = x * y + 1; } else { z = -1; }
a[i] += b[j] << 2; c ^= d | e & ~f; // bit tricks
print(f"{name!r}: {value:.3f}")  # formatted
SELECT name, COUNT(*) FROM tokens WHERE id > 100 GROUP BY name;

Emoji and symbols: 🙂 🚀 ✨ → ≤ ≥ ≠ ∑ ∞ € £ ¥ © ® ™ ° ± × ÷.
Accents: café, naïve, résumé, Ångström, São Paulo, Zürich, façade.
Русский текст тоже встречается в данных. Ελληνικά γράμματα: α β γ δ.
한국어 문장도 조금 있습니다.

	Tabs	separate	these	columns
    and four spaces indent this line
        and eight spaces indent this one


Two blank lines came before this sentence, and the end is near.
`

// Synthesize returns a small, real tokenizer.json in the form DeepSeek-V3
// ships: DeepSeek's three Splits and ByteLevel pre-tokenizer, a ByteLevel
// decoder, and a byte-level BPE vocabulary of BOS, EOS and PAD (ids 0-2,
// also listed as special added tokens), the 256 byte tokens (id 3+b for
// byte b) and nMerges merged tokens (ids 259 on), learned by BPE training
// on a built-in sample of prose, Chinese, Japanese, code and numbers. The
// vocabulary size is therefore 259 + nMerges. The output depends only on
// nMerges. It fails if nMerges is negative or more than the sample yields.
func Synthesize(nMerges int) ([]byte, error) {
	if nMerges < 0 {
		return nil, fmt.Errorf("nMerges %d is negative", nMerges)
	}
	first := len(synthSpecials)
	tokens := make([][]byte, first, first+256+nMerges) // id -> bytes; nil for specials
	for b := range 256 {
		tokens = append(tokens, []byte{byte(b)})
	}
	merges, err := trainMerges(&tokens, nMerges)
	if err != nil {
		return nil, err
	}
	return encodeSynth(tokens, merges), nil
}

// synthFillPrefix begins every filler word of SynthesizeVocab. The sample
// never holds it, even lowercased, so no learned token normalises to a
// filler word's spelling.
const synthFillPrefix = "zq"

// SynthesizeVocab returns a tokenizer.json of Synthesize's form with
// exactly vocab ids, for a checkpoint whose vocabulary is far larger than
// the sample can teach: nMerges merges learned from the sample, then
// words filler words ("zq", "zqa" ... "zqz", "zqaa" ..., each the merge of
// the one before it in the tree and a letter), then the rest as the
// filler words in the same order with a leading space (" zq" ...). The
// fillers are real BPE tokens but no text the sample resembles uses them;
// a leading-space copy differs from its word only by whitespace, as
// " the" and "the" do in a trained vocabulary. The output depends only on
// the arguments. It fails unless 259 + nMerges + words <= vocab <= 259 +
// nMerges + 2·words.
func SynthesizeVocab(vocab, nMerges, words int) ([]byte, error) {
	if nMerges < 0 || words < 0 {
		return nil, fmt.Errorf("nMerges %d or words %d is negative", nMerges, words)
	}
	spaced := vocab - len(synthSpecials) - 256 - nMerges - words
	if spaced < 0 || spaced > words {
		return nil, fmt.Errorf("vocabulary %d does not fit %d merges and %d filler words (and at most as many spaced copies)", vocab, nMerges, words)
	}
	first := len(synthSpecials)
	tokens := make([][]byte, first, vocab)
	for b := range 256 {
		tokens = append(tokens, []byte{byte(b)})
	}
	merges, err := trainMerges(&tokens, nMerges)
	if err != nil {
		return nil, err
	}
	byteID := func(c byte) int32 { return int32(first) + int32(c) }
	fill := make([]int32, 0, words) // ids of the filler words, in order
	add := func(a, b int32) int32 {
		id := int32(len(tokens))
		tokens = append(tokens, slices.Concat(tokens[a], tokens[b]))
		merges = append(merges, [2]int32{a, b})
		return id
	}
	if words > 0 {
		fill = append(fill, add(byteID(synthFillPrefix[0]), byteID(synthFillPrefix[1])))
	}
	for parent := 0; len(fill) < words; parent++ {
		for c := byte('a'); c <= 'z' && len(fill) < words; c++ {
			fill = append(fill, add(fill[parent], byteID(c)))
		}
	}
	for _, w := range fill[:spaced] {
		add(byteID(' '), w)
	}
	return encodeSynth(tokens, merges), nil
}

// encodeSynth writes tokens (id -> bytes, nil for the specials) and their
// merges in rank order as a tokenizer.json.
func encodeSynth(tokens [][]byte, merges [][2]int32) []byte {
	first := len(synthSpecials)
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for id, s := range synthSpecials {
		if id > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    {\n      \"id\": %d,\n      \"content\": %s,\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n      \"normalized\": true,\n      \"special\": true\n    }", id, jsonString(s))
	}
	b.WriteString("\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {\n    \"type\": \"Sequence\",\n    \"pretokenizers\": [")
	for _, p := range []string{patternDigits, patternCJK, patternDeepSeek} {
		fmt.Fprintf(&b, "\n      {\n        \"type\": \"Split\",\n        \"pattern\": {\n          \"Regex\": %s\n        },\n        \"behavior\": \"Isolated\",\n        \"invert\": false\n      },", jsonString(p))
	}
	b.WriteString(`
      {
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": true,
        "use_regex": false
      }
    ]
  },
  "post_processor": {
    "type": "ByteLevel",
    "add_prefix_space": true,
    "trim_offsets": false,
    "use_regex": true
  },
  "decoder": {
    "type": "ByteLevel",
    "add_prefix_space": true,
    "trim_offsets": true,
    "use_regex": true
  },
  "model": {
    "type": "BPE",
    "dropout": null,
    "unk_token": null,
    "continuing_subword_prefix": null,
    "end_of_word_suffix": null,
    "fuse_unk": false,
    "byte_fallback": false,
    "vocab": {`)
	for id, tok := range tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		var s string
		if id < first {
			s = synthSpecials[id]
		} else {
			s = byteLevelSpelling(tok)
		}
		fmt.Fprintf(&b, "\n      %s: %d", jsonString(s), id)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			b.WriteByte(',')
		}
		pair := byteLevelSpelling(tokens[m[0]]) + " " + byteLevelSpelling(tokens[m[1]])
		fmt.Fprintf(&b, "\n      %s", jsonString(pair))
	}
	b.WriteString("\n    ]\n  }\n}\n")
	return b.Bytes()
}

// SynthesizeConfig returns the tokenizer_config.json to ship beside
// Synthesize's tokenizer.json: DeepSeek's LlamaTokenizerFast settings, BOS
// added, EOS not.
func SynthesizeConfig() []byte {
	token := func(s string) string {
		return fmt.Sprintf("{\n    \"__type\": \"AddedToken\",\n    \"content\": %s,\n    \"lstrip\": false,\n    \"normalized\": true,\n    \"rstrip\": false,\n    \"single_word\": false\n  }", jsonString(s))
	}
	return fmt.Appendf(nil, `{
  "add_bos_token": true,
  "add_eos_token": false,
  "bos_token": %s,
  "clean_up_tokenization_spaces": false,
  "eos_token": %s,
  "legacy": true,
  "model_max_length": 16384,
  "pad_token": %s,
  "tokenizer_class": "LlamaTokenizerFast",
  "unk_token": null
}
`, token(synthBOS), token(synthEOS), token(synthPad))
}

// jsonString quotes s as JSON, leaving <, > and & as they are.
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// trainMerges learns n merges from synthSample by byte-pair counting over
// its DeepSeek pre-tokens, appending each merged token to *tokens (ids
// index it) and returning the merged pairs in rank order. Each round merges
// the most frequent adjacent pair, ties going to the lower ids, among pairs
// whose result is not already a token, so that every merge adds one.
func trainMerges(tokens *[][]byte, n int) ([][2]int32, error) {
	pre := &Tokenizer{splits: []split{
		{pattern: knownPatterns[patternDigits], behavior: isolated},
		{pattern: knownPatterns[patternCJK], behavior: isolated},
		{pattern: knownPatterns[patternDeepSeek], behavior: isolated},
	}}
	counts := make(map[string]int)
	e := encoder{t: pre, bufs: make([]splitBufs, len(pre.splits)+1)}
	e.word = func(w string) { counts[w]++ }
	e.pretokenize(synthSample, 0)

	type word struct {
		syms  []int32
		count int
	}
	first := int32(len(*tokens) - 256)
	words := make([]word, 0, len(counts))
	for _, w := range slices.Sorted(maps.Keys(counts)) {
		syms := make([]int32, len(w))
		for i := range len(w) {
			syms[i] = first + int32(w[i])
		}
		words = append(words, word{syms, counts[w]})
	}
	exists := make(map[string]bool, len(*tokens)+n)
	for _, t := range *tokens {
		exists[string(t)] = true
	}

	merges := make([][2]int32, 0, n)
	pairs := make(map[uint64]int)
	for len(merges) < n {
		clear(pairs)
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[pairKey(w.syms[i], w.syms[i+1])] += w.count
			}
		}
		var best uint64
		bestCount := 0
		for k, c := range pairs {
			a, b := int32(k>>32), int32(uint32(k))
			if exists[string((*tokens)[a])+string((*tokens)[b])] {
				continue
			}
			if c > bestCount || (c == bestCount && k < best) {
				best, bestCount = k, c
			}
		}
		if bestCount == 0 {
			return nil, fmt.Errorf("the sample yields only %d merges, not %d", len(merges), n)
		}
		a, b := int32(best>>32), int32(uint32(best))
		id := int32(len(*tokens))
		merged := slices.Concat((*tokens)[a], (*tokens)[b])
		*tokens = append(*tokens, merged)
		exists[string(merged)] = true
		merges = append(merges, [2]int32{a, b})
		for wi := range words {
			syms := words[wi].syms
			out := syms[:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
					out = append(out, id)
					i++
				} else {
					out = append(out, syms[i])
				}
			}
			words[wi].syms = out
		}
	}
	return merges, nil
}

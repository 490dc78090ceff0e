package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// deepSeekPreTokenizer is the pre_tokenizer of DeepSeek-V3's tokenizer.json,
// spelled with the file's JSON escapes.
const deepSeekPreTokenizer = `{"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[一-龥\u3040-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}`

// fixture describes a small tokenizer.json. Token texts are raw bytes; the
// file spells them in the byte-level alphabet.
type fixture struct {
	merges        [][2]string // merge rules in rank order; results join the vocabulary
	extra         []string    // further vocabulary entries
	added         []addedToken
	normalizer    string // JSON, "" for null
	preTokenizer  string // JSON, "" for DeepSeek's
	postProcessor string // JSON, "" for null
	pairMerges    bool   // write merges as ["a", "b"] rather than "a b"
	ignoreMerges  bool
	unk           bool // add an "<unk>" token and name it unk_token
	fuseUnk       bool
	dropBytes     string // bytes whose tokens are left out
}

// doc returns the tokenizer.json as a JSON object, for tests to alter.
func (f fixture) doc() map[string]any {
	vocab := map[string]int{}
	add := func(spelling string) {
		if _, ok := vocab[spelling]; !ok {
			vocab[spelling] = len(vocab)
		}
	}
	for b := range 256 {
		if !strings.ContainsRune(f.dropBytes, rune(b)) {
			add(string(byteRune[b]))
		}
	}
	merges := []any{}
	for _, m := range f.merges {
		a, b := byteLevelSpelling([]byte(m[0])), byteLevelSpelling([]byte(m[1]))
		add(a + b)
		if f.pairMerges {
			merges = append(merges, []string{a, b})
		} else {
			merges = append(merges, a+" "+b)
		}
	}
	for _, e := range f.extra {
		add(byteLevelSpelling([]byte(e)))
	}
	var unk any
	if f.unk {
		add("<unk>")
		unk = "<unk>"
	}
	added := make([]addedToken, len(f.added))
	for i, a := range f.added {
		a.ID = len(vocab) + i
		added[i] = a
	}
	raw := func(s, fallback string) json.RawMessage {
		if s == "" {
			s = fallback
		}
		return json.RawMessage(s)
	}
	return map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     raw(f.normalizer, "null"),
		"pre_tokenizer":  raw(f.preTokenizer, deepSeekPreTokenizer),
		"post_processor": raw(f.postProcessor, "null"),
		"decoder":        json.RawMessage(`{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`),
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": f.fuseUnk, "byte_fallback": false,
			"ignore_merges": f.ignoreMerges, "vocab": vocab, "merges": merges,
		},
	}
}

func mustParse(t testing.TB, doc map[string]any) *Tokenizer {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return tok
}

// texts returns the raw bytes of each token, the form expectations are
// written in.
func texts(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(tok.DecodeBytes([]int{id}))
	}
	return out
}

const eos = "<｜end▁of▁sentence｜>"

var helloFixture = fixture{
	merges: [][2]string{
		{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
		{" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"},
		{" ", " "}, {"1", "2"}, {"12", "3"},
		{"\xe6", "\xb7"}, {"\xe6\xb7", "\xb1"}, // 深
		{"\t", "d"}, {"\td", "e"}, {"\tde", "f"}, {"\n", "\n"},
	},
	added: []addedToken{{Content: eos, Special: true}},
}

// The expectations follow from DeepSeek's Splits (digits in threes, CJK
// runs, then the main pattern) and the merges above, by hand.
func TestEncodeByHand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"hello world", []string{"hello", " world"}},
		{"Hello", []string{"H", "e", "ll", "o"}},
		{"hello   world", []string{"hello", "  ", " world"}},
		{"1234567", []string{"123", "4", "5", "6", "7"}},
		{"a 123", []string{"a", " ", "123"}},
		{"深深", []string{"深", "深"}},
		{"hello深", []string{"hello", "深"}},
		{"价1", []string{"\xe4", "\xbb", "\xb7", "1"}},
		{"\tdef f():\n\n", []string{"\tdef", " ", "f", "(", ")", ":", "\n\n"}},
		{"  \n  x", []string{"  ", "\n", " ", " ", "x"}},
		{"🙂", []string{"\xf0", "\x9f", "\x99", "\x82"}},
		{"hello" + eos + "world", []string{"hello", eos, "w", "or", "ld"}},
		{eos + eos, []string{eos, eos}},
		{"he\xffllo", []string{"he", "\xef", "\xbf", "\xbd", "ll", "o"}},
		{"<｜end▁of", []string{"<", "\xef", "\xbd", "\x9c", "e", "n", "d", "\xe2", "\x96", "\x81", "o", "f"}},
	}
	for _, form := range []bool{false, true} {
		f := helloFixture
		f.pairMerges = form
		tok := mustParse(t, f.doc())
		for _, tt := range tests {
			ids := encodeAll(tok, tt.in, false)
			if got := texts(tok, ids); !slices.Equal(got, tt.want) {
				t.Errorf("pair merges %v: Encode(%q) = %q, want %q", form, tt.in, got, tt.want)
			}
			if got, want := tok.Decode(ids), lossyUTF8(tt.in); got != want {
				t.Errorf("Decode(Encode(%q)) = %q, want %q", tt.in, got, want)
			}
		}
	}
}

func TestPieceAndToken(t *testing.T) {
	tok := mustParse(t, helloFixture.doc())
	ids := encodeAll(tok, "深 world", false)
	if got, want := texts(tok, ids), []string{"深", " world"}; !slices.Equal(got, want) {
		t.Fatalf("Encode = %q, want %q", got, want)
	}
	if got := tok.Token(ids[0]); got != "æ·±" {
		t.Errorf("Token(深) = %q, want the byte-level spelling æ·±", got)
	}
	if got := tok.Token(ids[1]); got != "Ġworld" {
		t.Errorf("Token( world) = %q, want Ġworld", got)
	}
	if got := tok.Piece(ids[1]); got != " world" {
		t.Errorf("Piece = %q", got)
	}
	half, _ := tok.TokenID("æ·")
	if got := tok.Piece(half); got != "\uFFFD" {
		t.Errorf("Piece of a partial character = %q, want U+FFFD", got)
	}
	id, ok := tok.TokenID(eos)
	if !ok || tok.Piece(id) != eos || tok.Token(id) != eos {
		t.Errorf("special token %d %v: Piece %q Token %q", id, ok, tok.Piece(id), tok.Token(id))
	}
	if tok.Token(-1) != "" || tok.Token(tok.VocabSize()) != "" || tok.Piece(1<<30) != "" {
		t.Error("unknown ids should have empty text")
	}
	if got := tok.Decode([]int{-5, ids[1], 1 << 30}); got != " world" {
		t.Errorf("Decode skips unknown ids: got %q", got)
	}
}

func TestDecodeRepairsUTF8(t *testing.T) {
	tok := mustParse(t, helloFixture.doc())
	id := func(s string) int {
		i, ok := tok.TokenID(byteLevelSpelling([]byte(s)))
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	// 深 cut after two bytes, then a letter: one U+FFFD, as from_utf8_lossy.
	if got := tok.Decode([]int{id("\xe6\xb7"), id("a")}); got != "\uFFFDa" {
		t.Errorf("got %q", got)
	}
	if got := tok.DecodeBytes([]int{id("\xe6\xb7"), id("\xb1")}); string(got) != "深" {
		t.Errorf("DecodeBytes = %q", got)
	}
}

func TestLossyUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe6\x88A", "\uFFFDA"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate is not a subpart
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\xf0\x9f\x98\x80", "\uFFFD😀"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xe0\x80", "\uFFFD\uFFFD"},
		{"a\uFFFDb", "a\uFFFDb"},
	}
	for _, tt := range tests {
		if got := lossyUTF8(tt.in); got != tt.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPreTokens(t *testing.T) {
	tok := mustParse(t, helloFixture.doc())
	tests := []struct {
		in   string
		want []string
	}{
		{"价格是100元", []string{"价格是", "100", "元"}},
		{"hello世界", []string{"hello", "世界"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"x=12345;", []string{"x", "=", "123", "45", ";"}},
		{"日本語のテキスト", []string{"日本語のテキスト"}},
		{"if (a) {\n\treturn 0;\n}", []string{"if", " (", "a", ")", " {\n", "\treturn", " ", "0", ";\n", "}"}},
	}
	for _, tt := range tests {
		var got []string
		e := encoder{t: tok, bufs: make([]splitBufs, len(tok.splits)+1)}
		e.word = func(w string) { got = append(got, w) }
		e.pretokenize(tt.in, 0)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q -> %q, want %q", tt.in, got, tt.want)
		}
	}
	for i, sp := range tok.splits {
		if _, ok := sp.pattern.(scanner); !ok {
			t.Errorf("Split %d of DeepSeek's pre_tokenizer runs on %T, want a scanner", i, sp.pattern)
		}
	}
}

func TestAddedTokenFlags(t *testing.T) {
	f := fixture{
		added: []addedToken{
			{Content: "<R>", RStrip: true, Special: true},
			{Content: "<L>", LStrip: true, Special: true},
			{Content: "ab", SingleWord: true},
			{Content: "<K>", Special: true},    // matched before normalization
			{Content: "<n>", Normalized: true}, // matched after it
			{Content: "<long>", Special: true},
			{Content: "<lo", Special: true},
		},
		normalizer: `{"type": "Sequence", "normalizers": [
			{"type": "Replace", "pattern": {"String": "K"}, "content": "k"},
			{"type": "Replace", "pattern": {"String": "N"}, "content": "n"},
			{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}`,
	}
	tok := mustParse(t, f.doc())
	tests := []struct {
		in   string
		want []string
	}{
		{"a<R>  b", []string{"a", "<R>", "b"}},
		{"a  <L>b", []string{"a", "<L>", "b"}},
		{"  <L><R>  ", []string{"<L>", "<R>"}},
		{"ab cd", []string{"ab", " ", "c", "d"}},
		{"xab", []string{"x", "a", "b"}},
		{"ab_", []string{"a", "b", "_"}},
		{"(ab)", []string{"(", "ab", ")"}},
		{"<K>", []string{"<K>"}},
		{"<k>K", []string{"<", "k", ">", "k"}},
		{"<N>", []string{"<n>"}},
		{"<long><lo", []string{"<long>", "<lo"}},
		{"a    b", []string{"a", " ", "b"}},
	}
	for _, tt := range tests {
		if got := texts(tok, encodeAll(tok, tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestModelOptions(t *testing.T) {
	tests := []struct {
		name string
		f    fixture
		in   string
		want []string
	}{
		{"merges only", fixture{extra: []string{"xyz"}}, "xyz", []string{"x", "y", "z"}},
		{"ignore_merges", fixture{extra: []string{"xyz"}, ignoreMerges: true}, "xyz", []string{"xyz"}},
		{"ignore_merges miss", fixture{extra: []string{"xyz"}, ignoreMerges: true}, "xyzw", []string{"x", "y", "z", "w"}},
		{"no unk drops", fixture{dropBytes: "q"}, "aqqb", []string{"a", "b"}},
		{"unk", fixture{dropBytes: "q", unk: true}, "aqqb", []string{"a", "<unk>", "<unk>", "b"}},
		{"fuse_unk", fixture{dropBytes: "q", unk: true, fuseUnk: true}, "aqqbq", []string{"a", "<unk>", "b", "<unk>"}},
		{"ByteLevel regex and prefix space", fixture{
			preTokenizer: `{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}`,
			merges:       [][2]string{{" ", "h"}, {" h", "i"}},
		}, "hi there's 12", []string{" hi", " ", "t", "h", "e", "r", "e", "'", "s", " ", "1", "2"}},
		{"ByteLevel prefix space per piece", fixture{
			preTokenizer: `{"type": "Sequence", "pretokenizers": [
				{"type": "Split", "pattern": {"String": "-"}, "behavior": "Removed", "invert": false},
				{"type": "ByteLevel", "add_prefix_space": true, "use_regex": false}]}`,
		}, "a-b", []string{" ", "a", " ", "b"}},
	}
	for _, tt := range tests {
		tok := mustParse(t, tt.f.doc())
		if got := texts(tok, encodeAll(tok, tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Encode(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	set := func(path ...any) func(map[string]any) {
		return func(doc map[string]any) {
			m := doc
			for _, k := range path[:len(path)-2] {
				m = m[k.(string)].(map[string]any)
			}
			m[path[len(path)-2].(string)] = path[len(path)-1]
		}
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	tests := []struct {
		name  string
		alter func(map[string]any)
		want  string
	}{
		{"NFC", set("normalizer", raw(`{"type": "NFC"}`)), `"NFC"`},
		{"Lowercase in sequence", set("normalizer", raw(`{"type": "Sequence", "normalizers": [{"type": "Lowercase"}]}`)), `"Lowercase"`},
		{"Whitespace", set("pre_tokenizer", raw(`{"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, {"type": "ByteLevel"}]}`)), `"Whitespace"`},
		{"no ByteLevel", set("pre_tokenizer", raw(`{"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated"}`)), "ByteLevel"},
		{"ByteLevel first", set("pre_tokenizer", raw(`{"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "ByteLevel"}]}`)), "last"},
		{"lookahead", set("pre_tokenizer", raw(`{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "a(?=b)"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}`)), `"a(?=b)"`},
		{"behavior", set("pre_tokenizer", raw(`{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": "a"}, "behavior": "Split"}, {"type": "ByteLevel"}]}`)), `"Split"`},
		{"no decoder", set("decoder", nil), "decoder"},
		{"WordPiece decoder", set("decoder", raw(`{"type": "WordPiece"}`)), `"WordPiece"`},
		{"Bert post-processor", set("post_processor", raw(`{"type": "BertProcessing"}`)), `"BertProcessing"`},
		{"Unigram", set("model", "type", "Unigram"), `"Unigram"`},
		{"dropout", set("model", "dropout", 0.1), "dropout"},
		{"byte_fallback", set("model", "byte_fallback", true), "byte_fallback"},
		{"suffix", set("model", "end_of_word_suffix", "</w>"), "end_of_word_suffix"},
		{"unk missing", set("model", "unk_token", "<nope>"), "<nope>"},
		{"merge token", set("model", "merges", []string{"h zz"}), "zz"},
		{"merge form", set("model", "merges", []string{"h e l"}), "h e l"},
		{"merge pair", set("model", "merges", [][]string{{"h", "e", "l"}}), "3 tokens"},
		{"truncation", set("truncation", map[string]any{"max_length": 5}), "truncation"},
		{"template", set("post_processor", raw(`{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {}}`)), "<s>"},
	}
	for _, tt := range tests {
		doc := helloFixture.doc()
		tt.alter(doc)
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Parse error %v, want one mentioning %s", tt.name, err, tt.want)
		}
	}
	if _, err := Parse([]byte("{")); err == nil {
		t.Error("Parse accepted broken JSON")
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

// Ids of added tokens follow tokenizers' AddedVocabulary, not the file: a
// token in the vocabulary keeps its id, a new one comes after the largest
// id so far (or after the vocabulary), an empty one is skipped, and a
// repeated one keeps its first id and takes the later flags.
func TestAddedTokenIDs(t *testing.T) {
	doc := fixture{}.doc()
	vocabSize := len(doc["model"].(map[string]any)["vocab"].(map[string]int))
	doc["added_tokens"] = []addedToken{
		{ID: 9999, Content: "<a>"},
		{ID: 7, Content: "x"}, // in the vocabulary
		{ID: 3, Content: ""},
		{ID: 3, Content: "<b>"},
		{ID: 0, Content: "<a>", RStrip: true},
	}
	tok := mustParse(t, doc)
	for content, want := range map[string]int{"<a>": vocabSize, "x": int('x'), "<b>": vocabSize + 1} {
		if got, ok := tok.TokenID(content); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", content, got, ok, want)
		}
	}
	if got, want := encodeAll(tok, "<a>  <b>", false), []int{vocabSize, vocabSize + 1}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v (the second <a> brings rstrip)", got, want)
	}
	if tok.VocabSize() != vocabSize+2 {
		t.Errorf("VocabSize = %d, want %d", tok.VocabSize(), vocabSize+2)
	}
}

func TestSpecialTokensAround(t *testing.T) {
	f := helloFixture
	f.added = append(slices.Clone(f.added), addedToken{Content: "<s>", Special: true})
	doc := f.doc()
	tok := mustParse(t, doc)
	sID, _ := tok.TokenID("<s>")
	eosID, _ := tok.TokenID(eos)
	if _, ok := bos(tok); ok {
		t.Error("BOS set without a post-processor or config")
	}
	if got := encodeAll(tok, "hello", true); len(got) != 1 {
		t.Errorf("Encode with nothing to add = %v", got)
	}

	// A TemplateProcessing post-processor puts its tokens around $A.
	tmpl := `{"type": "TemplateProcessing",
		"single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "eos", "type_id": 0}}],
		"pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [` + itoa(sID) + `], "tokens": ["<s>"]}, "eos": {"id": "eos", "ids": [` + itoa(eosID) + `], "tokens": ["eos"]}}}`
	doc["post_processor"] = json.RawMessage(`{"type": "Sequence", "processors": [{"type": "ByteLevel"}, ` + tmpl + `]}`)
	tok = mustParse(t, doc)
	if got, want := encodeAll(tok, "hello", true), []int{sID, encodeAll(tok, "hello", false)[0], eosID}; !slices.Equal(got, want) {
		t.Errorf("TemplateProcessing: %v, want %v", got, want)
	}
	if got := encodeAll(tok, "hello", false); len(got) != 1 {
		t.Errorf("addSpecial false still added: %v", got)
	}

	// tokenizer_config.json, as LlamaTokenizerFast reads it.
	configs := []struct {
		name           string
		config         string
		prefix, suffix []int
		err            string
	}{
		{"object bos", `{"add_bos_token": true, "bos_token": {"__type": "AddedToken", "content": "<s>"}, "tokenizer_class": "LlamaTokenizerFast"}`, []int{sID}, nil, ""},
		{"string bos, llama default", `{"bos_token": "<s>", "tokenizer_class": "LlamaTokenizerFast"}`, []int{sID}, nil, ""},
		{"bos off, eos on", `{"add_bos_token": false, "add_eos_token": true, "bos_token": "<s>", "eos_token": "` + eos + `"}`, nil, []int{eosID}, ""},
		{"vocab token as bos", `{"add_bos_token": true, "bos_token": "hello"}`, []int{mustID(t, tok, "hello")}, nil, ""},
		{"other class keeps template", `{"bos_token": "<s>", "tokenizer_class": "PreTrainedTokenizerFast"}`, []int{sID}, []int{eosID}, ""},
		{"unknown bos", `{"add_bos_token": true, "bos_token": "<nope>"}`, nil, nil, "<nope>"},
		{"null bos", `{"add_bos_token": true, "bos_token": null}`, nil, nil, "bos_token"},
		{"bad bos", `{"add_bos_token": true, "bos_token": 7}`, nil, nil, "bos_token"},
		{"bad json", `{`, nil, nil, "unexpected"},
	}
	for _, c := range configs {
		tok := mustParse(t, doc)
		err := tok.ParseConfig([]byte(c.config))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		body := encodeAll(tok, "hello", false)
		want := slices.Concat(c.prefix, body, c.suffix)
		if got := encodeAll(tok, "hello", true); !slices.Equal(got, want) {
			t.Errorf("%s: Encode = %v, want %v", c.name, got, want)
		}
		bos, ok := bos(tok)
		if ok != (len(c.prefix) > 0) || (ok && bos != c.prefix[0]) {
			t.Errorf("%s: BOS() = %d, %v", c.name, bos, ok)
		}
	}
}

func mustID(t *testing.T, tok *Tokenizer, spelling string) int {
	id, ok := tok.TokenID(spelling)
	if !ok {
		t.Fatalf("no token %q", spelling)
	}
	return id
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	data, err := Synthesize(40)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, SynthesizeConfig(), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.LoadConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if bos, ok := bos(tok); !ok || bos != 0 {
		t.Errorf("BOS() = %d, %v; want 0", bos, ok)
	}
	if err := tok.LoadConfig(filepath.Join(dir, "absent.json")); err == nil {
		t.Error("LoadConfig of a missing file succeeded")
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"model": {"type": "WordLevel"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load error %v should name the file", err)
	}
}

// synthesized is the tokenizer the property tests share.
var synthesized = sync.OnceValues(func() (*Tokenizer, error) {
	data, err := Synthesize(400)
	if err != nil {
		return nil, err
	}
	return Parse(data)
})

func mustSynthesized(t testing.TB) *Tokenizer {
	tok, err := synthesized()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestRoundTrip(t *testing.T) {
	tok := mustSynthesized(t)
	r, seed := newRand(t)
	specials := []string{"<｜begin▁of▁sentence｜>", eos, "<｜▁pad▁｜>"}
	n := 5000
	if testing.Short() {
		n = 500
	}
	for range n {
		s := randomText(r, 40)
		if r.IntN(4) == 0 {
			i := r.IntN(len(s) + 1)
			for i < len(s) && !utf8.RuneStart(s[i]) {
				i--
			}
			s = s[:i] + specials[r.IntN(len(specials))] + s[i:]
		}
		ids := encodeAll(tok, s, false)
		if got := tok.Decode(ids); got != s {
			t.Fatalf("seed %d: Decode(Encode(%q)) = %q (ids %v)", seed, s, got, ids)
		}
		if got := string(tok.DecodeBytes(ids)); got != s {
			t.Fatalf("seed %d: DecodeBytes(Encode(%q)) = %q", seed, s, got)
		}
		// Any bytes: Encode sees the repaired text.
		b := []byte(s)
		if len(b) > 0 {
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
		if got, want := encodeAll(tok, string(b), false), encodeAll(tok, lossyUTF8(string(b)), false); !slices.Equal(got, want) {
			t.Fatalf("seed %d: Encode(%q) = %v, want Encode of the repaired text %v", seed, b, got, want)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := mustSynthesized(t)
	lines := strings.Split(synthSample, "\n")
	want := make(map[string][]int, len(lines))
	for _, l := range lines {
		want[l] = encodeAll(tok, l, false)
	}
	// A fresh tokenizer, so that the workers race to fill its cache.
	data, err := Synthesize(400)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := range lines {
				l := lines[(i+w*7)%len(lines)]
				if got := encodeAll(fresh, l, false); !slices.Equal(got, want[l]) {
					errs <- l
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for l := range errs {
		t.Errorf("concurrent Encode(%q) differs", l)
	}
}

// TestLoadBound: a tokenizer.json past MaxFileSize (here a sparse file of
// 8 GiB) is refused by its size, naming the file, without reading it.
func TestLoadBound(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(8 << 30); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	_, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json: 8589934592 bytes, more than the 67108864 bytes") {
		t.Errorf("Load: %v", err)
	}
	var tok Tokenizer
	if err := tok.LoadConfig(filepath.Join(dir, "tokenizer_config.json")); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json: 8589934592 bytes") {
		t.Errorf("LoadConfig: %v", err)
	}
}

// bos returns the token Encode puts first when asked to add special tokens,
// and false if it adds none there.
func bos(t *Tokenizer) (int, bool) {
	if len(t.prefix) == 0 {
		return 0, false
	}
	return t.prefix[0], true
}

// TestVocabRule checks the one rule Parse and ParseVocab resolve ids by:
// two spellings of one model id are refused with the same message every
// time (Go's map order once picked the spelling), and an added token equal
// to a model token is that token, at the model's id.
func TestVocabRule(t *testing.T) {
	file := func(vocab, added string) []byte {
		return []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2` + vocab + `}, "merges": ["a b"]}, "added_tokens": [` + added + `],
			"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}, "decoder": {"type": "ByteLevel"}}`)
	}
	shared := file(`, "x": 1, "y": 1`, "")
	for range 10 {
		for name, parse := range map[string]func([]byte) error{
			"Parse":      func(b []byte) error { _, err := Parse(b); return err },
			"ParseVocab": func(b []byte) error { _, err := ParseVocab(b); return err },
		} {
			if err := parse(shared); err == nil || !strings.Contains(err.Error(), `tokens "b" and "x" and "y" share id 1`) {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	added := file("", `{"id": 7, "content": "ab"}, {"id": 9, "content": "<s>", "special": true}`)
	v, err := ParseVocab(added)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(added)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token string
		id    int
	}{{"ab", 2}, {"<s>", 3}} {
		if id, ok := v.ID(c.token); !ok || id != c.id {
			t.Errorf("ParseVocab: %q is id %d (%v), want %d", c.token, id, ok, c.id)
		}
		if id, ok := tok.TokenID(c.token); !ok || id != c.id {
			t.Errorf("Parse: %q is id %d (%v), want %d", c.token, id, ok, c.id)
		}
	}
	if len(v.Tokens) != 4 || !v.Has(3) || v.Has(4) {
		t.Errorf("tokens %q", v.Tokens)
	}
	if n := v.Notes(); len(n) != 2 || !strings.Contains(n[0], "model's own token") || !strings.Contains(n[1], "next free id") {
		t.Errorf("notes %q", n)
	}
}

// encodeAll encodes s with no bound the tests' short texts could reach.
func encodeAll(tok *Tokenizer, s string, addSpecial bool) []int {
	ids, err := tok.Encode(s, addSpecial, 1<<20)
	if err != nil {
		panic(err)
	}
	return ids
}

// TestTokenizerVocab: the Vocab of a parsed Tokenizer is the one
// ParseVocab reads from the same file, table for table, for a synthesized
// vocabulary and for files whose ids resolve by every branch of the rule
// (added tokens that are model tokens, that take the next free id, that
// are given twice, beside holes in the model's ids); where the Tokenizer
// cannot give the file's merges (a repeated merge, a model token's id
// taken by another spelling), Vocab says so.
func TestTokenizerVocab(t *testing.T) {
	synth, err := SynthesizeVocab(2000, 300, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// model is a file's model with a vocab and its merges entry (none
	// when empty).
	model := func(vocab, merges, added string) []byte {
		if merges != "" {
			merges = `, "merges": ` + merges
		}
		return []byte(`{"model": {"type": "BPE", "vocab": {` + vocab + `}` + merges + `}, "added_tokens": [` + added + `],
			"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}, "decoder": {"type": "ByteLevel"}}`)
	}
	file := func(vocab, merges, added string) []byte { return model(vocab, "["+merges+"]", added) }
	for _, tc := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"synthesized", synth, true},
		{"added", file(`"a": 0, "b": 1, "ab": 2`, `"a b"`,
			`{"id": 7, "content": "ab"}, {"id": 9, "content": "<s>", "special": true}, {"id": 3, "content": "<s>"}, {"id": 4, "content": "</s>"}`), true},
		{"holes", file(`"a": 0, "b": 5, "ab": 9`, `"a b"`, `{"id": 1, "content": "<pad>"}, {"id": 12, "content": "x"}`), true},
		{"no merges", file(`"a": 0, "b": 1`, "", ""), true},
		{"merges null", model(`"a": 0`, "null", ""), true},
		{"merges absent", model(`"a": 0`, "", ""), true},
		{"repeated merge", file(`"a": 0, "b": 1, "ab": 2, "abb": 3`, `"a b", "ab b", "a b"`, ""), false},
		{"model id respelled", file(`"a": 0, "b": 1, "ab": 3`, `"a b"`, `{"id": 2, "content": "<s>"}, {"id": 3, "content": "<t>"}`), false},
	} {
		tok, err := Parse(tc.data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, err := ParseVocab(tc.data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, ok := tok.Vocab()
		if ok != tc.ok {
			t.Fatalf("%s: Vocab says %v, want %v", tc.name, ok, tc.ok)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Tokenizer.Vocab\n%+v\nParseVocab\n%+v", tc.name, got, want)
		}
	}
}

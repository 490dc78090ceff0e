package tokenizer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzEncode(f *testing.F) {
	for _, s := range []string{
		"", "hello world", "a   b", "深度学习 123456", "\tdef f():\n\n  return 1\n",
		"<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>", "😀\u0301\u3000x", "\xff\xe6\x88", "'s 'll",
	} {
		f.Add(s)
	}
	tok := mustSynthesized(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := encodeAll(tok, s, true)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q) gave id %d", s, id)
			}
		}
		if got, want := tok.Decode(encodeAll(tok, s, false)), lossyUTF8(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		if !utf8.ValidString(tok.Decode(ids)) {
			t.Fatalf("Decode gave invalid UTF-8 for %q", s)
		}
		for _, at := range []scanner{digitsScanner, cjkScanner, knownPatterns[patternDeepSeek], knownPatterns[patternGPT2]} {
			prev := 0
			for _, m := range at.matches(nil, s) {
				if m[0] < prev || m[1] <= m[0] || m[1] > len(s) {
					t.Fatalf("%q: bad match %v", s, m)
				}
				prev = m[1]
			}
		}
	})
}

// FuzzParse loads arbitrary tokenizer.json documents, as a mount does with
// the checkpoint's file: no panic, and a document that loads encodes and
// decodes text without panicking or producing ids outside its vocabulary.
func FuzzParse(f *testing.F) {
	good, err := Synthesize(40)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[["a","b"]]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\s+(?!\\S)"},"behavior":"Isolated"}}`))
	f.Add([]byte(`{"added_tokens":[{"id":5,"content":"<s>","special":true}],"model":{"type":"BPE","vocab":{"<s>":0}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		// A file Parse takes, ParseVocab takes too, and the Tokenizer's
		// vocabulary is the file's wherever it says it can give it.
		want, err := ParseVocab(data)
		if err != nil {
			t.Fatalf("Parse takes the file, ParseVocab refuses it: %v", err)
		}
		if v, ok := tok.Vocab(); ok && !reflect.DeepEqual(v, want) {
			t.Fatalf("Tokenizer.Vocab\n%+v\nParseVocab\n%+v", v, want)
		}
		for _, s := range []string{"", "hello world 123", "深度学习", "<s> a\tb\n", "\xff"} {
			for _, id := range encodeAll(tok, s, true) {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d of a %d-token vocabulary", s, id, tok.VocabSize())
				}
			}
			tok.Decode(encodeAll(tok, s, false))
		}
	})
}

func TestSparseIDsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{`"a":0,"b":1`, true},
		{`"a":0,"b":60000`, true}, // a few holes are fine
		{`"a":0,"b":16000000`, false},
		{`"a":-1`, false},
	} {
		doc := `{"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{` + tc.doc + `}}}`
		if _, err := Parse([]byte(doc)); (err == nil) != tc.ok {
			t.Errorf("Parse(%s) = %v, want ok %v", tc.doc, err, tc.ok)
		}
	}
}

// FuzzNormalizerChain runs chains of Replace normalizers that may grow a
// text without bound (the hostile case: five Replace("a" -> 1,000 "a")
// once grew a prompt to 12 GB): loading and encoding either succeed
// within maxTokens or fail with ErrTooLong, never past the bound.
func FuzzNormalizerChain(f *testing.F) {
	good, err := Synthesize(40)
	if err != nil {
		f.Fatal(err)
	}
	var base map[string]any
	if err := json.Unmarshal(good, &base); err != nil {
		f.Fatal(err)
	}
	f.Add("a", strings.Repeat("a", 1000), uint8(5), "a banana and an apple")
	f.Add(" ", "  ", uint8(3), "spaces   here")
	f.Add("x", "", uint8(1), "xxx")
	f.Add("深", "深度学习", uint8(4), "深深深")
	f.Fuzz(func(t *testing.T, pattern, content string, steps uint8, text string) {
		steps = steps%6 + 1
		chain := make([]any, steps)
		for i := range chain {
			chain[i] = map[string]any{"type": "Replace", "pattern": map[string]any{"String": pattern}, "content": content}
		}
		base["normalizer"] = map[string]any{"type": "Sequence", "normalizers": chain}
		doc, err := json.Marshal(base)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := Parse(doc)
		if err != nil {
			return
		}
		const maxTokens = 64
		ids, err := tok.Encode(text, true, maxTokens)
		switch {
		case err != nil && !errors.Is(err, ErrTooLong):
			t.Fatalf("Encode(%q): %v, not ErrTooLong", text, err)
		case err == nil && len(ids) > maxTokens:
			t.Fatalf("Encode(%q) gave %d tokens, over %d", text, len(ids), maxTokens)
		}
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q) gave id %d", text, id)
			}
		}
	})
}

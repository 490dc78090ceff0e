package tokenizer

import (
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
		ids := tok.Encode(s, true)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q) gave id %d", s, id)
			}
		}
		if got, want := tok.Decode(tok.Encode(s, false)), lossyUTF8(s); got != want {
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
		for _, s := range []string{"", "hello world 123", "深度学习", "<s> a\tb\n", "\xff"} {
			for _, id := range tok.Encode(s, true) {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d of a %d-token vocabulary", s, id, tok.VocabSize())
				}
			}
			tok.Decode(tok.Encode(s, false))
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

package gguf_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/tokenizer"
)

// reopenWith writes config.json of cat's directory with key set to value
// and opens the checkpoint again.
func reopenWith(t *testing.T, cat *checkpoint.Catalog, key string, value any) *checkpoint.Catalog {
	t.Helper()
	b, err := checkpoint.PatchConfig(cat.ConfigBytes, []string{key}, value)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cat.Dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := checkpoint.Open(cat.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Close() })
	return again
}

// TestVocabSizeClaims holds closed a config.json vocab_size the tensors
// do not back: 2,000,000,000 killed the process at mount (out of memory
// making the token list), 100,000,000 took 73 s and 10 GB, and 600 over a
// 512-row embedding served a GGUF llama.cpp refuses. Each is now one line
// naming config.json and the value, at the cost of a few megabytes.
func TestVocabSizeClaims(t *testing.T) {
	families := []struct {
		name   string
		open   func(t *testing.T) *checkpoint.Catalog
		recipe string
	}{
		{"deepseek4", openV4, "MXFP4"},
		{"deepseek2", func(t *testing.T) *checkpoint.Catalog { return openReference(t, "v3-tiny", false) }, "BF16"},
	}
	for _, f := range families {
		for _, n := range []int64{2_000_000_000, 100_000_000, 600, 0} {
			t.Run(fmt.Sprintf("%s/%d", f.name, n), func(t *testing.T) {
				cat := reopenWith(t, f.open(t), "vocab_size", n)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				_, err := recipe(t, f.recipe).Plan(cat)
				runtime.ReadMemStats(&after)
				if err == nil || !strings.Contains(err.Error(), "config.json: ") || !strings.Contains(err.Error(), "vocab_size") ||
					!strings.Contains(err.Error(), fmt.Sprint(n)) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("Plan: %v; want one line naming config.json and vocab_size %d", err, n)
				}
				if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
					t.Errorf("refusing took %d MiB", got>>20)
				}
			})
		}
	}
}

// tokenizerKVs is TokenizerKVs of a tokenizer.json document, its
// vocabulary read as a mount reads it (checkpoint.Catalog.Vocab): from the
// parsed Tokenizer where tokenizer.Parse takes the document and the
// Tokenizer can give it, from the document alone otherwise.
func tokenizerKVs(doc []byte, vocab int) ([]gguf.KV, []string, error) {
	var v *tokenizer.Vocab
	ok := false
	if tok, err := tokenizer.Parse(doc); err == nil {
		v, ok = tok.Vocab()
	}
	if !ok {
		var err error
		if v, err = tokenizer.ParseVocab(doc); err != nil {
			return nil, nil, fmt.Errorf("tokenizer.json: %w", err)
		}
	}
	return gguf.TokenizerKVs(v, nil, "deepseek-v3", vocab, nil)
}

// TestTokenizerSameBytes holds closed a token list that depended on Go's
// map order (two spellings of one id: different GGUF bytes on every
// mount) and an added token equal to a vocabulary token at another id,
// which was written twice. The first is refused with a message that is
// itself always the same; the second is written once, at the
// vocabulary's id, as transformers gives it to llama.cpp's converter.
func TestTokenizerSameBytes(t *testing.T) {
	base := func(extraVocab, added string) []byte {
		return []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2` + extraVocab + `}, "merges": ["a b"]},
			"added_tokens": [` + added + `]}`)
	}
	t.Run("two spellings of one id", func(t *testing.T) {
		tok := base(`, "x": 1, "y": 1`, "")
		var first string
		for range 20 {
			_, _, err := tokenizerKVs(tok, 8)
			if err == nil {
				t.Fatal("two spellings of one id accepted")
			}
			if first == "" {
				first = err.Error()
			} else if err.Error() != first {
				t.Fatalf("the error changes from call to call: %q, then %q", first, err)
			}
		}
		if !strings.Contains(first, `"b" and "x" and "y" share id 1`) {
			t.Errorf("error %q does not name the spellings in order", first)
		}
	})
	t.Run("added token equal to a vocabulary token", func(t *testing.T) {
		tok := base("", `{"id": 5, "content": "ab", "special": true}, {"id": 3, "content": "<|x|>", "special": true}`)
		var first []byte
		for range 20 {
			kvs, notes, err := tokenizerKVs(tok, 8)
			if err != nil {
				t.Fatal(err)
			}
			var tokens []string
			for _, kv := range kvs {
				if kv.Key == "tokenizer.ggml.tokens" {
					tokens = kv.Value.([]string)
				}
			}
			n := 0
			for _, s := range tokens {
				if s == "ab" {
					n++
				}
			}
			if n != 1 || tokens[2] != "ab" || tokens[3] != "<|x|>" || tokens[5] != "[PAD5]" {
				t.Fatalf("tokens %q: want ab once at id 2, <|x|> at 3 and a hole at 5", tokens)
			}
			if len(notes) != 1 || !strings.Contains(notes[0], `"ab": id 5 in the file, 2`) {
				t.Errorf("notes %q", notes)
			}
			b, err := json.Marshal(kvs)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = b
			} else if !bytes.Equal(b, first) {
				t.Fatal("the metadata changes from call to call")
			}
		}
	})
}

// FuzzTokenizerKVs feeds arbitrary tokenizer.json documents to the GGUF
// tokenizer arrays, as a mount does with the checkpoint's file: no panic,
// and a document that is accepted gives exactly vocab tokens and types,
// the same bytes twice, and no spelling at two ids that hold a token.
func FuzzTokenizerKVs(f *testing.F) {
	for _, doc := range []string{
		`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"x":1},"merges":["a b"]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0,"b":2,"ab":3},"merges":[["a","b"]]},"added_tokens":[{"id":2,"content":"<s>","special":true},{"id":9,"content":"ab"}]}`,
		`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"added_tokens":[{"id":3,"content":""},{"id":3,"content":"<|x|>"},{"id":3,"content":"<|x|>","special":true}]}`,
	} {
		f.Add([]byte(doc), uint16(8))
	}
	f.Fuzz(func(t *testing.T, doc []byte, vocab uint16) {
		kvs, _, err := tokenizerKVs(doc, int(vocab))
		if err != nil {
			return
		}
		again, _, err := tokenizerKVs(doc, int(vocab))
		if err != nil {
			t.Fatalf("accepted once, then refused: %v", err)
		}
		a, _ := json.Marshal(kvs)
		b, _ := json.Marshal(again)
		if !bytes.Equal(a, b) {
			t.Fatal("the same document gave different metadata")
		}
		var tokens []string
		var types []int32
		for _, kv := range kvs {
			switch kv.Key {
			case "tokenizer.ggml.tokens":
				tokens = kv.Value.([]string)
			case "tokenizer.ggml.token_type":
				types = kv.Value.([]int32)
			}
		}
		if len(tokens) != int(vocab) || len(types) != int(vocab) {
			t.Fatalf("%d tokens and %d types for a vocabulary of %d", len(tokens), len(types), vocab)
		}
		at := make(map[string]int)
		for id, s := range tokens {
			if types[id] == 5 { // UNUSED: a hole's [PADi]
				continue
			}
			if prev, ok := at[s]; ok {
				t.Fatalf("%q is written at ids %d and %d", s, prev, id)
			}
			at[s] = id
		}
	})
}

// TestSinkhornItersClaim holds closed a GGUF that would tell llama.cpp to
// run hc_sinkhorn_iters 1e9 mixing passes a token: refused in one line.
func TestSinkhornItersClaim(t *testing.T) {
	cat := reopenWith(t, openV4(t), "hc_sinkhorn_iters", 1_000_000_000)
	_, err := recipe(t, "MXFP4").Plan(cat)
	if err == nil || !strings.Contains(err.Error(), "config.json: hc_sinkhorn_iters 1000000000") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Plan: %v", err)
	}
}

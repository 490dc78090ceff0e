package tokenizer

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"
)

// testdata/hf_golden.json holds what Hugging Face tokenizers (the Rust
// library, through its Node binding; see hf_golden.js) encodes texts to,
// for a synthesized DeepSeek-V3 tokenizer.json and variants of it: the
// DeepSeek-LLM (V2) Splits, GPT-2's ByteLevel regex with a prefix space,
// added tokens with every flag behind Replace normalizers, and the Split
// behaviors. The texts mix every character class the patterns tell apart,
// restricted to characters Unicode 15 (Go's tables) has assigned.
func TestHuggingFaceGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/hf_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Generator string
		Tokenizer map[string]json.RawMessage
		Variants  []struct {
			Name     string
			Override map[string]json.RawMessage
			Cases    []struct {
				Text string
				IDs  []int
			}
		}
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Variants) == 0 {
		t.Fatal("no variants")
	}
	for _, v := range golden.Variants {
		doc := maps.Clone(golden.Tokenizer)
		maps.Copy(doc, v.Override)
		file, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := Parse(file)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		for _, c := range v.Cases {
			if got := encodeAll(tok, c.Text, false); !slices.Equal(got, c.IDs) {
				t.Errorf("%s: Encode(%q)\n got %q\nwant %q (%s)", v.Name, c.Text, spellings(tok, got), spellings(tok, c.IDs), golden.Generator)
			}
		}
	}
}

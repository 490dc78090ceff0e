package tokenizer

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSynthesize(t *testing.T) {
	const n = 253 // fills a 512-token vocabulary
	data, err := Synthesize(n)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Synthesize(n)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Fatal("Synthesize is not deterministic")
	}
	if !json.Valid(data) {
		t.Fatal("invalid JSON")
	}
	var doc struct {
		AddedTokens []addedToken `json:"added_tokens"`
		Model       struct {
			Vocab  map[string]int
			Merges []string
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Model.Vocab) != 259+n || len(doc.Model.Merges) != n {
		t.Errorf("vocab %d, merges %d; want %d and %d", len(doc.Model.Vocab), len(doc.Model.Merges), 259+n, n)
	}
	for i, want := range []string{synthBOS, synthEOS, synthPad} {
		if doc.AddedTokens[i].ID != i || doc.AddedTokens[i].Content != want || !doc.AddedTokens[i].Special || doc.Model.Vocab[want] != i {
			t.Errorf("special %d: %+v", i, doc.AddedTokens[i])
		}
	}

	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 259+n {
		t.Errorf("VocabSize %d", tok.VocabSize())
	}
	for i, sp := range tok.splits {
		if _, ok := sp.pattern.(scanner); !ok {
			t.Errorf("Split %d runs on %T, want a scanner", i, sp.pattern)
		}
	}
	if err := tok.ParseConfig(SynthesizeConfig()); err != nil {
		t.Fatal(err)
	}
	if bos, ok := bos(tok); !ok || bos != 0 {
		t.Errorf("BOS() = %d, %v", bos, ok)
	}
	ids := tok.Encode(synthSample, true)
	if ids[0] != 0 || tok.Decode(ids[1:]) != synthSample {
		t.Error("the sample does not round-trip")
	}
	if len(ids) > len(synthSample)*2/3 {
		t.Errorf("%d merges encode the %d-byte sample in %d tokens; expected real compression", n, len(synthSample), len(ids))
	}
	// Merges learned on the sample are used on it: common words are whole.
	for _, w := range []string{" the", " Expert", " logits"} {
		if _, ok := tok.TokenID(byteLevelSpelling([]byte(w))); !ok {
			t.Errorf("no merged token for %q", w)
		}
	}
}

func TestSynthesizeLimits(t *testing.T) {
	for _, n := range []int{-1, 1 << 20} {
		if _, err := Synthesize(n); err == nil {
			t.Errorf("Synthesize(%d) succeeded", n)
		}
	}
	data, err := Synthesize(0)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("héllo", false); len(got) != len("héllo") {
		t.Errorf("without merges every byte is a token: %v", got)
	}
	if !strings.Contains(string(SynthesizeConfig()), `"LlamaTokenizerFast"`) {
		t.Error("config lacks the tokenizer class")
	}
}

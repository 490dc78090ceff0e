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
	ids := encodeAll(tok, synthSample, true)
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
	if got := encodeAll(tok, "héllo", false); len(got) != len("héllo") {
		t.Errorf("without merges every byte is a token: %v", got)
	}
	if !strings.Contains(string(SynthesizeConfig()), `"LlamaTokenizerFast"`) {
		t.Error("config lacks the tokenizer class")
	}
}

func TestSynthesizeVocab(t *testing.T) {
	const vocab, merges, words = 2000, 300, 1000 // 441 spaced copies
	data, err := SynthesizeVocab(vocab, merges, words)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := SynthesizeVocab(vocab, merges, words); err != nil || !bytes.Equal(data, again) {
		t.Fatalf("SynthesizeVocab is not deterministic (%v)", err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != vocab {
		t.Fatalf("VocabSize %d, want %d", tok.VocabSize(), vocab)
	}
	learned := 259 + merges
	for _, tc := range []struct {
		id   int
		want string
	}{
		{0, synthBOS}, {2, synthPad}, {3 + 'a', "a"},
		{learned, "zq"}, {learned + 1, "zqa"}, {learned + 26, "zqz"}, {learned + 27, "zqaa"},
		{learned + words - 1, "zq" + fillSpelling(words-1)},
		{learned + words, " zq"}, {learned + words + 1, " zqa"}, {vocab - 1, " zq" + fillSpelling(vocab-learned-words-1)},
	} {
		if got := tok.Decode([]int{tc.id}); got != tc.want {
			t.Errorf("id %d decodes to %q, want %q", tc.id, got, tc.want)
		}
	}
	// The fillers never appear in the sample: learned tokens cannot share
	// their spelling, whatever the case.
	if strings.Contains(strings.ToLower(synthSample), synthFillPrefix) {
		t.Errorf("the sample holds %q", synthFillPrefix)
	}
	for _, bad := range [][3]int{{learned + words - 1, merges, words}, {learned + 2*words + 1, merges, words}, {vocab, -1, words}, {vocab, merges, -1}} {
		if _, err := SynthesizeVocab(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("SynthesizeVocab(%d, %d, %d) succeeded", bad[0], bad[1], bad[2])
		}
	}
}

// fillSpelling is the letters after "zq" of filler word i: the tree is
// breadth-first, so word i's parent is word (i-1)/26.
func fillSpelling(i int) string {
	if i == 0 {
		return ""
	}
	return fillSpelling((i-1)/26) + string(rune('a'+(i-1)%26))
}

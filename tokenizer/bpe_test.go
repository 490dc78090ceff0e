package tokenizer

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// refBPE is the textbook BPE of GPT-2's encoder.py: repeatedly take the
// adjacent pair with the lowest rank and merge all its occurrences, left to
// right. On merges learned by training it agrees with tokenizers' priority
// queue.
func refBPE(ranks map[[2]string]int, word []string) []string {
	for len(word) > 1 {
		best, bestRank := [2]string{}, math.MaxInt
		for i := 0; i+1 < len(word); i++ {
			if r, ok := ranks[[2]string{word[i], word[i+1]}]; ok && r < bestRank {
				best, bestRank = [2]string{word[i], word[i+1]}, r
			}
		}
		if bestRank == math.MaxInt {
			break
		}
		var out []string
		for i := 0; i < len(word); i++ {
			if i+1 < len(word) && word[i] == best[0] && word[i+1] == best[1] {
				out = append(out, best[0]+best[1])
				i++
			} else {
				out = append(out, word[i])
			}
		}
		word = out
	}
	return word
}

func TestBPEAgainstReference(t *testing.T) {
	data, err := Synthesize(1000)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Model struct{ Merges []string } }
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	ranks := make(map[[2]string]int)
	for i, m := range doc.Model.Merges {
		a, b, _ := strings.Cut(m, " ")
		ranks[[2]string{a, b}] = i
	}

	r, seed := newRand(t)
	words := strings.Fields(synthSample)
	var sc bpeScratch
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := range n {
		var w string
		switch i % 3 {
		case 0: // a piece of the training text, where merges abound
			s := words[r.IntN(len(words))]
			a := r.IntN(len(s))
			w = s[a : a+1+r.IntN(len(s)-a)]
		case 1:
			w = " " + words[r.IntN(len(words))]
		default:
			w = randomText(r, 8)
		}
		if w == "" {
			continue
		}
		got := spellings(tok, tok.model.merge(&sc, nil, w))
		var chars []string
		for _, c := range byteLevelSpelling([]byte(w)) {
			chars = append(chars, string(c))
		}
		if want := refBPE(ranks, chars); !slices.Equal(got, want) {
			t.Fatalf("seed %d: BPE(%q) = %q, want %q", seed, w, got, want)
		}
	}
}

func spellings(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tok.Token(id)
	}
	return out
}

// The priority queue must merge by rank, not by position: here the pair on
// the right outranks the one on the left, and a stale candidate (the pair
// "b c" after "a b" has merged) must not fire.
func TestBPEOrder(t *testing.T) {
	tests := []struct {
		merges [][2]string
		in     string
		want   []string
	}{
		{[][2]string{{"b", "c"}, {"a", "b"}}, "abc", []string{"a", "bc"}},
		{[][2]string{{"a", "b"}, {"b", "c"}}, "abc", []string{"ab", "c"}},
		{[][2]string{{"a", "a"}}, "aaaaa", []string{"aa", "aa", "a"}},
		{[][2]string{{"a", "a"}, {"aa", "aa"}}, "aaaaa", []string{"aaaa", "a"}},
		{[][2]string{{"a", "b"}, {"c", "d"}, {"ab", "cd"}, {"b", "c"}}, "abcd", []string{"abcd"}},
	}
	for _, tt := range tests {
		f := fixture{merges: tt.merges, preTokenizer: `{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}`}
		tok := mustParse(t, f.doc())
		if got := texts(tok, encodeAll(tok, tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("merges %q: %q -> %q, want %q", tt.merges, tt.in, got, tt.want)
		}
	}
}

func TestWordCache(t *testing.T) {
	var c wordCache
	for i := range cacheGeneration + 10 {
		c.put(string(rune(0x4E00+i)), []int{i})
	}
	if ids, ok := c.get(string(rune(0x4E00))); !ok || ids[0] != 0 {
		t.Errorf("entry of the old generation lost: %v %v", ids, ok)
	}
	for i := range 2 * cacheGeneration {
		c.put(string(rune(0x10000+i)), []int{i})
	}
	if _, ok := c.get(string(rune(0x4E01))); ok {
		t.Error("cache kept an entry two generations old")
	}
	long := strings.Repeat("x", maxCachedWord+1)
	c.put(long, []int{1})
	if _, ok := c.get(long); ok {
		t.Error("cache kept an over-long word")
	}
	if len(c.cur) > cacheGeneration || len(c.old) > cacheGeneration {
		t.Errorf("generations hold %d and %d words", len(c.cur), len(c.old))
	}
}

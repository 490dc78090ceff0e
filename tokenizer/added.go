package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         int    `json:"id"`
	File       int    `json:"-"` // the id the file gives, when ID is the one resolved
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedSet finds added tokens in text the way tokenizers' AddedVocabulary
// does with its Aho-Corasick automaton (leftmost-longest): a byte trie,
// walked from each position that can start a token.
type addedSet struct {
	tokens []addedToken
	child  map[uint64]int32 // node<<8 | byte -> child node; the root is 0
	end    []int32          // per node: index in tokens of the token ending there, or -1
	first  [256]bool        // bytes that begin some token
}

// newAddedSet indexes tokens, matching each by pattern[i] (its content, or
// the normalized content for tokens matched after normalization). It
// returns nil when there is nothing to match.
func newAddedSet(tokens []addedToken, pattern []string) *addedSet {
	a := &addedSet{tokens: tokens, child: make(map[uint64]int32), end: []int32{-1}}
	for i, p := range pattern {
		if p == "" {
			continue
		}
		a.first[p[0]] = true
		node := int32(0)
		for j := 0; j < len(p); j++ {
			key := uint64(node)<<8 | uint64(p[j])
			next, ok := a.child[key]
			if !ok {
				next = int32(len(a.end))
				a.child[key] = next
				a.end = append(a.end, -1)
			}
			node = next
		}
		if a.end[node] < 0 { // of contents that normalize alike, tokenizers takes the first
			a.end[node] = int32(i)
		}
	}
	if len(a.end) == 1 {
		return nil
	}
	return a
}

// longestAt returns the index of the longest token starting at byte i of s
// and the end of its match, or -1.
func (a *addedSet) longestAt(s string, i int) (tok, end int) {
	tok, end = -1, -1
	node := int32(0)
	for j := i; j < len(s); j++ {
		next, ok := a.child[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = next
		if k := a.end[node]; k >= 0 {
			tok, end = int(k), j+1
		}
	}
	return tok, end
}

// addedSegment is a piece of text: an added token's id, or -1 for text
// between tokens.
type addedSegment struct {
	start, end int
	id         int
}

// split cuts s into added tokens and the text around them, appending to
// dst. It follows AddedVocabulary::find_matches: a single_word token must
// not touch word characters, lstrip and rstrip widen a match over the
// whitespace beside it, and the search resumes after each candidate
// (accepted or not). A candidate that starts inside whitespace an earlier
// rstrip took is skipped; tokenizers would emit overlapping pieces there.
func (a *addedSet) split(dst []addedSegment, s string) []addedSegment {
	from := 0
	for i := 0; i < len(s); {
		if !a.first[s[i]] {
			i++
			continue
		}
		k, e := a.longestAt(s, i)
		if k < 0 {
			i++
			continue
		}
		start, stop := i, e
		i = e
		t := &a.tokens[k]
		if t.SingleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[stop:])) {
			continue
		}
		if start < from {
			continue
		}
		if t.LStrip {
			start = max(lastNonSpaceEnd(s[:start]), from)
		}
		if t.RStrip {
			stop += leadingSpace(s[stop:])
		}
		if from < start {
			dst = append(dst, addedSegment{from, start, -1})
		}
		dst = append(dst, addedSegment{start, stop, t.ID})
		from = stop
	}
	if from < len(s) {
		dst = append(dst, addedSegment{from, len(s), -1})
	}
	return dst
}

// isWordChar reports whether r is in Unicode's \w, the class single_word
// tests: Alphabetic (letters, letter numbers, Other_Alphabetic), marks,
// decimal digits, connector punctuation and the joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) ||
		unicode.In(r, unicode.Nd, unicode.Nl, unicode.Pc, unicode.Other_Alphabetic, unicode.Join_Control)
}

func endsWithWordChar(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// lastNonSpaceEnd returns the offset just after the last non-whitespace
// character of s, or 0.
func lastNonSpaceEnd(s string) int {
	for i := len(s); i > 0; {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			return i
		}
		i -= n
	}
	return 0
}

// leadingSpace returns the length of the whitespace at the start of s.
func leadingSpace(s string) int {
	for i, r := range s {
		if !unicode.IsSpace(r) {
			return i
		}
	}
	return len(s)
}

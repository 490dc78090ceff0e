package tokenizer

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestTranslateOniguruma(t *testing.T) {
	tests := []struct {
		in, want string
		err      string
	}{
		{in: `\p{N}+`, want: `\p{N}+`},
		{in: `\s?\p{L}+`, want: `[\t-\r\x{85}\p{Z}]?\p{L}+`},
		{in: `\S+`, want: `[^\t-\r\x{85}\p{Z}]+`},
		{in: `[\s\d]`, want: `[\t-\r\x{85}\p{Z}\p{Nd}]`},
		{in: `\w+`, err: `\w`},
		{in: `\D`, want: `\P{Nd}`},
		{in: `\s+$`, want: `[\t-\r\x{85}\p{Z}]+(?m:$)`},
		{in: `^a`, want: `(?m:^)a`},
		{in: `[^$^]`, want: `[^$^]`},
		{in: `[]a]`, want: `[]a]`},
		{in: `\p{^L}\P{N}`, want: `\p{^L}\P{N}`},
		{in: `[一-龥\u3040-ゟ]`, want: `[一-龥\x{3040}-ゟ]`},
		{in: `\\s\[s\]`, want: `\\s\[s\]`},
		{in: "[\r\n]", want: "[\r\n]"},
		{in: `[\S]`, err: `\S inside a character class`},
		{in: `[a[b]]`, err: "nested"},
		{in: `[a-z&&[^x]]`, err: "&&"},
		{in: `\bword\b`, err: `\b`},
		{in: `\h+`, err: `\h`},
		{in: `\u30`, err: "four hex digits"},
		{in: `a\`, err: "trailing backslash"},
	}
	for _, tt := range tests {
		got, err := translateOniguruma(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want one containing %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%q -> %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestCompilePattern(t *testing.T) {
	str := func(s string) patternJSON { return patternJSON{String: &s} }
	re := func(s string) patternJSON { return patternJSON{Regex: &s} }

	// The known patterns get their scanners, not a regexp.
	for _, p := range []string{patternDigits, patternCJK, patternDeepSeek, patternDeepSeekEscaped, patternGPT2} {
		m, err := re(p).compile()
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if _, ok := m.(scanner); !ok {
			t.Errorf("%q compiled to %T, want a scanner", p, m)
		}
	}

	// DeepSeek-LLM's Splits (DeepSeek-V2) run on Go's regexp, with \s widened
	// to White_Space: the no-break space and the ideographic space count.
	tests := []struct {
		p    patternJSON
		in   string
		want []string
	}{
		{re("[\r\n]"), "a\nb\r\n", []string{"a", "\n", "b", "\r", "\n"}},
		{re(`\s?[!-/:-~！-／：-～‘-‟　-。]+`), "1\u00a0!!1 ，。", []string{"1", "\u00a0!!", "1", " ，。"}},
		{re(`\s+$`), "ab \u3000", []string{"ab", " \u3000"}},
		{re(`\s+$`), "a \nb", []string{"a", " ", "\nb"}}, // $ is a line anchor
		{re("[一-龥ࠀ-一가-퟿]+"), "x한국中y", []string{"x", "한국中", "y"}},
		{re(`\p{N}+`), "a123b", []string{"a", "123", "b"}},
		{str("--"), "a---b", []string{"a", "--", "-b"}},
		{str("(?!"), "x(?!y", []string{"x", "(?!", "y"}}, // literal, not a regex
	}
	for _, tt := range tests {
		m, err := tt.p.compile()
		if err != nil {
			t.Fatalf("%+v: %v", tt.p, err)
		}
		if got := isolate(m, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%q on %q -> %q, want %q", *firstNonNil(tt.p.Regex, tt.p.String), tt.in, got, tt.want)
		}
	}

	// Other lookaheads are refused, naming the pattern.
	bad := `(?i:'s|'t)|\p{N}{1,3}|\s+(?!\S)`
	if _, err := re(bad).compile(); err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
		t.Errorf("compile(%q) error %v, want one naming the pattern", bad, err)
	}
	if _, err := (patternJSON{}).compile(); err == nil {
		t.Error("empty pattern compiled")
	}
}

func firstNonNil(a, b *string) *string {
	if a != nil {
		return a
	}
	return b
}

// The behaviors on "the-final--countdown" split by "-" are the examples of
// tokenizers' SplitDelimiterBehavior documentation; the inverted ones
// follow by flipping which segments count as matches.
func TestSplitBehaviors(t *testing.T) {
	const in = "the-final--countdown"
	tests := []struct {
		behavior string
		invert   bool
		want     []string
	}{
		{"Removed", false, []string{"the", "final", "countdown"}},
		{"Isolated", false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", false, []string{"the-", "final-", "-", "countdown"}},
		{"MergedWithNext", false, []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", false, []string{"the", "-", "final", "--", "countdown"}},
		{"Removed", true, []string{"-", "-", "-"}},
		{"Isolated", true, []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", true, []string{"the", "-final", "-", "-countdown"}},
		{"MergedWithNext", true, []string{"the-", "final-", "-", "countdown"}},
		{"Contiguous", true, []string{"the", "-", "final", "--", "countdown"}},
	}
	for _, tt := range tests {
		sp := split{pattern: literal("-"), behavior: behaviors[tt.behavior], invert: tt.invert}
		segs, _ := sp.segments(nil, nil, in)
		var got []string
		for _, sg := range segs {
			got = append(got, in[sg.start:sg.end])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s invert=%v: %q, want %q", tt.behavior, tt.invert, got, tt.want)
		}
	}
}

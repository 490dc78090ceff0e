package tokenizer

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// isolate returns the pieces an Isolated Split with m makes of s: the
// matches and the gaps between them.
func isolate(m matcher, s string) []string {
	sp := split{pattern: m, behavior: isolated}
	segs, _ := sp.segments(nil, nil, s)
	var out []string
	for _, sg := range segs {
		out = append(out, s[sg.start:sg.end])
	}
	return out
}

func TestScannersByHand(t *testing.T) {
	tests := []struct {
		name string
		at   func(string, int) int
		in   string
		want []string
	}{
		{"digits", digitsAt, "1234567", []string{"123", "456", "7"}},
		{"digits", digitsAt, "a12b", []string{"a", "12", "b"}},
		{"digits", digitsAt, "x 3.14159", []string{"x ", "3", ".", "141", "59"}},
		{"digits/No", digitsAt, "²³⁴⁵", []string{"²³⁴", "⁵"}},
		{"digits/fullwidth", digitsAt, "１２３４", []string{"１２３", "４"}},
		{"cjk", cjkAt, "中文abcかなカナ", []string{"中文", "abc", "かなカナ"}},
		{"cjk/bounds", cjkAt, "一龥龦゠ヿㇰ", []string{"一龥", "龦", "゠ヿ", "ㇰ"}},
		{"cjk/hangul", cjkAt, "한국어中", []string{"한국어", "中"}},

		{"deepseek/spaces", deepSeekAt, "a   b", []string{"a", "  ", " b"}},
		{"deepseek/sentence", deepSeekAt, "Hello, world!", []string{"Hello", ",", " world", "!"}},
		{"deepseek/method", deepSeekAt, ".append(x)", []string{".append", "(x", ")"}},
		{"deepseek/dotted", deepSeekAt, "foo.bar", []string{"foo", ".bar"}},
		{"deepseek/underscore", deepSeekAt, "._foo", []string{"._", "foo"}},
		{"deepseek/assign", deepSeekAt, "x = 1", []string{"x", " =", " ", "1"}},
		{"deepseek/code", deepSeekAt, "\n\n\tdef f():\n", []string{"\n\n", "\tdef", " f", "():\n"}},
		{"deepseek/indent", deepSeekAt, "  \n  x", []string{"  \n", " ", " x"}},
		{"deepseek/crlf", deepSeekAt, "a\r\nb", []string{"a", "\r\n", "b"}},
		{"deepseek/newline-letter", deepSeekAt, "\nfoo", []string{"\n", "foo"}},
		{"deepseek/trailing", deepSeekAt, "end   ", []string{"end", "   "}},
		{"deepseek/single-space", deepSeekAt, "a \t", []string{"a", " \t"}},
		{"deepseek/accents", deepSeekAt, "über café", []string{"über", " café"}},
		{"deepseek/combining", deepSeekAt, "e\u0301 \u0301abc", []string{"e\u0301", " \u0301abc"}},
		{"deepseek/currency", deepSeekAt, "$100", []string{"$", "100"}},
		{"deepseek/include", deepSeekAt, "#include <stdio.h>", []string{"#include", " <", "stdio", ".h", ">"}},
		{"deepseek/emoji", deepSeekAt, "😀😀 ok", []string{"😀😀", " ok"}},
		{"deepseek/control", deepSeekAt, "x\x00y\x01\x02", []string{"x", "\x00y", "\x01\x02"}},
		{"deepseek/contraction", deepSeekAt, "don't", []string{"don", "'t"}},
		{"deepseek/ideographic-space", deepSeekAt, "\u3000中文", []string{"\u3000中文"}},
		{"deepseek/punct-newlines", deepSeekAt, "end.\n\nNext", []string{"end", ".\n\n", "Next"}},
		{"deepseek/tab-run", deepSeekAt, "a\t\t\tb", []string{"a", "\t\t", "\tb"}},
		{"deepseek/nbsp", deepSeekAt, "a\u00a0\u00a0!", []string{"a", "\u00a0", "\u00a0", "!"}},

		{"gpt2/words", gpt2At, "Hello world", []string{"Hello", " world"}},
		{"gpt2/contraction", gpt2At, "I'm here, you'll see", []string{"I", "'m", " here", ",", " you", "'ll", " see"}},
		{"gpt2/spaces", gpt2At, "a   b", []string{"a", "  ", " b"}},
		{"gpt2/trailing", gpt2At, "x  ", []string{"x", "  "}},
		{"gpt2/numbers", gpt2At, "123 4567", []string{"123", " 4567"}},
		{"gpt2/punct", gpt2At, "foo!! !?", []string{"foo", "!!", " !?"}},
		{"gpt2/tab", gpt2At, "a \tb", []string{"a", " ", "\t", "b"}},
		{"gpt2/upper-contraction", gpt2At, "'S", []string{"'", "S"}},
		{"gpt2/space-apostrophe", gpt2At, " 's", []string{" '", "s"}},
		{"gpt2/newlines", gpt2At, "a\n\nb", []string{"a", "\n", "\n", "b"}},
	}
	for _, tt := range tests {
		if got := isolate(scanner{at: tt.at}, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q -> %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// palette holds characters from every class the patterns distinguish,
// boundary characters of their ranges, and multi-character sequences that
// trigger particular alternatives.
var palette = []string{
	"a", "Z", "é", "ß", "ж", "Ω", "한", "ا", // letters
	"\u0301", "\u0903", // marks
	"0", "7", "٣", "１", "²", "Ⅻ", // numbers
	".", ",", "'", "-", "_", "(", ")", "\"", "#", "!", "?", "，", "。", "、", "「", // punctuation
	"$", "+", "<", "=", "^", "`", "|", "~", "€", "∑", "😀", "🚀", "©", // symbols
	" ", " ", " ", "\t", "\n", "\r", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u3000", "\u2009", // whitespace
	"\x00", "\x7f", "\u200b", "\ue000", "\U000e0001", // other
	"中", "文", "一", "龥", "龦", "\u3040", "ゟ", "゠", "ヿ", "あ", "カ", "ㇰ", // CJK boundaries
	"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "\r\n", "  ", "\n\n", ".x", "the", " the", "123", "4567",
}

// randomText returns a string of up to maxLen palette entries and, now
// and then, arbitrary valid characters.
func randomText(r *rand.Rand, maxLen int) string {
	var b strings.Builder
	for n := r.IntN(maxLen + 1); n > 0; n-- {
		if r.IntN(20) == 0 {
			for {
				c := rune(r.IntN(0x30000))
				if utf8.ValidRune(c) {
					b.WriteRune(c)
					break
				}
			}
			continue
		}
		b.WriteString(palette[r.IntN(len(palette))])
	}
	return b.String()
}

func newRand(t testing.TB) (*rand.Rand, uint64) {
	seed := uint64(time.Now().UnixNano())
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed
}

// Reference implementations built on Go's regexp. \s is Oniguruma's
// White_Space class, written out. The final `\s+` is captured: where it
// matched a whitespace run followed by a non-space character, the real
// pattern's `\s+(?!\S)` (tried first) would have left that run's last
// character, provided one remains (refMatches does this).
const refSpace = `[\t-\r\x{85}\p{Z}]`

var (
	refDeepSeek = regexp.MustCompile(`[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|` + refSpace + `*[\r\n]+|(` + refSpace + `+)`)
	refGPT2     = regexp.MustCompile(`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\t-\r\x{85}\p{Z}\p{L}\p{N}]+|(` + refSpace + `+)`)
)

func refMatches(re *regexp.Regexp, s string) [][2]int {
	var out [][2]int
	for p := 0; p < len(s); {
		loc := re.FindStringSubmatchIndex(s[p:])
		if loc == nil {
			break
		}
		start, end := p+loc[0], p+loc[1]
		if loc[2] >= 0 && end < len(s) {
			if _, n := utf8.DecodeLastRuneInString(s[start:end]); end-n > start {
				end -= n
			}
		}
		out = append(out, [2]int{start, end})
		p = end
	}
	return out
}

type reMatcher func(string) [][2]int

func (f reMatcher) matches(dst [][2]int, s string) [][2]int { return append(dst, f(s)...) }

func TestScannersAgainstRegexp(t *testing.T) {
	r, seed := newRand(t)
	digits := regexp.MustCompile(patternDigits) // both are valid RE2 as written
	cjk := regexp.MustCompile(patternCJK)
	refs := []struct {
		name string
		scan scanner
		ref  matcher
	}{
		{"digits", digitsScanner, regexpMatcher{digits}},
		{"cjk", cjkScanner, regexpMatcher{cjk}},
		{"deepseek", scanner{at: deepSeekAt}, reMatcher(func(s string) [][2]int { return refMatches(refDeepSeek, s) })},
		{"gpt2", scanner{at: gpt2At}, reMatcher(func(s string) [][2]int { return refMatches(refGPT2, s) })},
	}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		s := randomText(r, 24)
		for _, ref := range refs {
			got := ref.scan.matches(nil, s)
			want := ref.ref.matches(nil, s)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d: %s on %q:\n got %q\nwant %q", seed, ref.name, s, pieces(s, got), pieces(s, want))
			}
		}
	}
}

func pieces(s string, ranges [][2]int) []string {
	var out []string
	for _, r := range ranges {
		out = append(out, s[r[0]:r[1]])
	}
	return out
}

func TestScannersInvalidUTF8(t *testing.T) {
	// Encode repairs its input, but the scanners must still make progress
	// and stay within bounds on any bytes.
	for _, s := range []string{"\xff", "a\xffb", "\xe6\x88", " \xf0\x9f", "\xc0\xaf  x", "''\xff"} {
		for _, at := range []scanner{digitsScanner, cjkScanner, knownPatterns[patternDeepSeek], knownPatterns[patternGPT2]} {
			prev := 0
			for _, m := range at.matches(nil, s) {
				if m[0] < prev || m[1] <= m[0] || m[1] > len(s) {
					t.Fatalf("%q: bad match %v", s, m)
				}
				prev = m[1]
			}
		}
	}
}

package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Split patterns of DeepSeek's tokenizer.json, as the strings read from
// the JSON. DeepSeek-V3, R1, V4 and V4.1 carry the same three Splits, each
// with "behavior": "Isolated" and "invert": false, followed by
// {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}.
// In the file (JSON escapes) they read:
//
//	"\\p{N}{1,3}"
//	"[一-龥\u3040-ゟ゠-ヿ]+"
//	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
//
// so the CR and LF of the third pattern are literal characters, not regex
// escapes. (llama.cpp's "deepseek-v3" pre-tokenizer carries the same three
// strings.) The older DeepSeek-LLM pre-tokenizer has six Splits that RE2
// can express once \s is widened (see translateOniguruma); they take the
// regexp path.
const (
	patternDigits   = `\p{N}{1,3}`
	patternCJK      = "[一-龥\u3040-ゟ゠-ヿ]+"
	patternDeepSeek = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

	// patternDeepSeekEscaped is the third pattern with CR and LF written as
	// regex escapes, as some copies of it are spelled; it means the same.
	patternDeepSeekEscaped = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

	// patternGPT2 is the regex of the ByteLevel pre-tokenizer (use_regex).
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// knownPatterns maps each pattern with a hand-written scanner to it.
var knownPatterns = map[string]scanner{
	patternDigits:          digitsScanner,
	patternCJK:             cjkScanner,
	patternDeepSeek:        {at: deepSeekAt},
	patternDeepSeekEscaped: {at: deepSeekAt},
	patternGPT2:            {at: gpt2At},
}

var (
	digitsScanner = scanner{digitsAt, startBytes("0123456789", 0xC2, 0xF4)}
	cjkScanner    = scanner{cjkAt, startBytes("", 0xE3, 0xE9)} // U+3040 is E3 81 80, U+9FA5 is E9 BE A5
)

// A scanner implements one pattern.
type scanner struct {
	// at returns the end of the match that starts at byte p of s, or -1
	// if the pattern does not match there.
	at func(s string, p int) int
	// start, if not nil, marks the bytes a match can begin with; the
	// search steps over the others (continuation bytes among them)
	// without decoding.
	start *[256]bool
}

// startBytes returns a start set of the given ASCII bytes and the lead
// bytes lo..hi.
func startBytes(ascii string, lo, hi byte) *[256]bool {
	var t [256]bool
	for i := range len(ascii) {
		t[ascii[i]] = true
	}
	for b := int(lo); b <= int(hi); b++ {
		t[b] = true
	}
	return &t
}

// matches implements matcher: the successive leftmost matches, each search
// resuming where the previous match ended, as find_iter does.
func (sc scanner) matches(dst [][2]int, s string) [][2]int {
	for p := 0; p < len(s); {
		if sc.start != nil && !sc.start[s[p]] {
			p++
			continue
		}
		if e := sc.at(s, p); e > p {
			dst = append(dst, [2]int{p, e})
			p = e
			continue
		}
		_, n := decode(s, p)
		p += n
	}
	return dst
}

// Character classes, as bits so that a scanner tests a union in one step.
// Each character has at most one: the general categories are disjoint and
// White_Space characters are all separators or controls.
const (
	classL uint8 = 1 << iota // \p{L}
	classM                   // \p{M}
	classN                   // \p{N}
	classP                   // \p{P}
	classS                   // \p{S}
	classW                   // \s: Oniguruma matches the White_Space property in UTF-8 mode
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range t {
		t[r] = classOf(rune(r))
	}
	return t
}()

func classOf(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return classL
	case unicode.IsMark(r):
		return classM
	case unicode.IsNumber(r):
		return classN
	case unicode.IsPunct(r):
		return classP
	case unicode.IsSymbol(r):
		return classS
	case unicode.IsSpace(r):
		return classW
	}
	return 0
}

func class(r rune) uint8 {
	if uint32(r) < utf8.RuneSelf {
		return asciiClass[r]
	}
	return classOf(r)
}

// decode returns the character at byte i of s and its width. An invalid
// byte reads as U+FFFD of width 1 (a symbol), so scanners never stall.
func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// classAt returns the class of the character at byte i, with its rune and
// width; past the end it returns zeros.
func classAt(s string, i int) (uint8, rune, int) {
	if i >= len(s) {
		return 0, 0, 0
	}
	r, n := decode(s, i)
	return class(r), r, n
}

// runIn returns the end of the run of characters from byte i whose class is
// in mask.
func runIn(s string, i int, mask uint8) int {
	for i < len(s) {
		r, n := decode(s, i)
		if class(r)&mask == 0 {
			break
		}
		i += n
	}
	return i
}

// runOut returns the end of the run of characters from byte i whose class
// is not in mask.
func runOut(s string, i int, mask uint8) int {
	for i < len(s) {
		r, n := decode(s, i)
		if class(r)&mask != 0 {
			break
		}
		i += n
	}
	return i
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

func isASCIIAlpha(r rune) bool { return ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') }

// digitsAt implements \p{N}{1,3}.
func digitsAt(s string, p int) int {
	c, _, n := classAt(s, p)
	if c != classN {
		return -1
	}
	end := p + n
	for k := 1; k < 3; k++ {
		c, _, n := classAt(s, end)
		if c != classN {
			break
		}
		end += n
	}
	return end
}

// isKanaOrHan reports membership of [一-龥\u3040-ゟ゠-ヿ]: U+4E00..U+9FA5 and
// U+3040..U+30FF.
func isKanaOrHan(r rune) bool {
	return (0x4E00 <= r && r <= 0x9FA5) || (0x3040 <= r && r <= 0x30FF)
}

// cjkAt implements [一-龥\u3040-ゟ゠-ヿ]+.
func cjkAt(s string, p int) int {
	end := p
	for end < len(s) {
		r, n := decode(s, end)
		if !isKanaOrHan(r) {
			break
		}
		end += n
	}
	if end == p {
		return -1
	}
	return end
}

// whitespaceAt implements the tail `\s+(?!\S)|\s+` shared by DeepSeek's and
// GPT-2's patterns, for a whitespace run starting at p. A run that reaches
// the end of s matches whole; a run followed by a non-space character gives
// it its last character (which the next match may take as a leading space),
// unless that would leave nothing, in which case `\s+` takes the one
// character.
func whitespaceAt(s string, p int) int {
	end, last := p, p
	for end < len(s) {
		r, n := decode(s, end)
		if class(r) != classW {
			break
		}
		last = end
		end += n
	}
	if end == len(s) || last == p {
		return end
	}
	return last
}

// deepSeekAt implements patternDeepSeek, trying its alternatives in order
// at p:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+   ASCII punctuation, then ASCII letters
//	[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+               letters and marks, one optional leader
//	 ?[\p{P}\p{S}]+[\r\n]*                             punctuation and symbols, then line breaks
//	\s*[\r\n]+                                         whitespace through its last line break
//	\s+(?!\S)|\s+                                      whitespace (see whitespaceAt)
//
// The ASCII characters in \p{P} or \p{S} are exactly the 32 of the first
// class, so the first alternative is tested by class.
func deepSeekAt(s string, p int) int {
	c, r, n := classAt(s, p)
	q := p + n
	c2, r2, n2 := classAt(s, q)
	switch {
	case r < utf8.RuneSelf && c&(classP|classS) != 0 && isASCIIAlpha(r2):
		end := q + n2
		for end < len(s) && isASCIIAlpha(rune(s[end])) {
			end++
		}
		return end
	case c&(classL|classM) != 0:
		return runIn(s, q, classL|classM)
	case !isCRLF(r) && c&(classL|classP|classS) == 0 && c2&(classL|classM) != 0:
		return runIn(s, q+n2, classL|classM)
	case r == ' ' && c2&(classP|classS) != 0:
		return crlfRun(s, runIn(s, q+n2, classP|classS))
	case c&(classP|classS) != 0:
		return crlfRun(s, runIn(s, q, classP|classS))
	case c == classW:
		if e := lineBreaksAt(s, p); e > 0 {
			return e
		}
		return whitespaceAt(s, p)
	}
	return -1
}

// crlfRun returns the end of the run of CR and LF from byte i.
func crlfRun(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// lineBreaksAt implements \s*[\r\n]+ at p: \s* backtracks from the end of
// the whitespace run to its last line break, which [\r\n]+ then takes, so
// the match ends just after the run's last CR or LF. It returns -1 if the
// run has none.
func lineBreaksAt(s string, p int) int {
	end := -1
	for i := p; i < len(s); {
		r, n := decode(s, i)
		if class(r) != classW {
			break
		}
		if isCRLF(r) {
			end = i + 1
		}
		i += n
	}
	return end
}

// gpt2At implements patternGPT2, trying its alternatives in order at p:
// the contractions 's 't 're 've 'm 'll 'd, then a run of letters, of
// numbers, or of anything else but whitespace, each with one optional
// leading space, then whitespace (see whitespaceAt).
func gpt2At(s string, p int) int {
	if s[p] == '\'' {
		for _, suffix := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
			if len(s)-p-1 >= len(suffix) && s[p+1:p+1+len(suffix)] == suffix {
				return p + 1 + len(suffix)
			}
		}
	}
	c, r, n := classAt(s, p)
	q := p + n
	if r == ' ' && q < len(s) {
		switch c2, _, _ := classAt(s, q); {
		case c2 == classL:
			return runIn(s, q, classL)
		case c2 == classN:
			return runIn(s, q, classN)
		case c2&(classW|classL|classN) == 0:
			return runOut(s, q, classW|classL|classN)
		}
	}
	switch {
	case c == classL:
		return runIn(s, q, classL)
	case c == classN:
		return runIn(s, q, classN)
	case c != classW:
		return runOut(s, q, classW|classL|classN)
	}
	return whitespaceAt(s, p)
}

package tokenizer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// A matcher finds the successive non-overlapping matches of a pattern.
type matcher interface {
	// matches appends the [start, end) byte ranges of the matches in s.
	matches(dst [][2]int, s string) [][2]int
}

// patternJSON is a Split or Replace pattern: {"String": ...} or {"Regex": ...}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// compile returns the matcher for a pattern: a literal for String, the
// hand-written scanner for a known Regex, else Go's regexp on the pattern
// rewritten from Oniguruma syntax.
func (p patternJSON) compile() (matcher, error) {
	switch {
	case p.String != nil && p.Regex == nil:
		return literal(*p.String), nil
	case p.Regex != nil && p.String == nil:
		if at, ok := knownPatterns[*p.Regex]; ok {
			return at, nil
		}
		expr, err := translateOniguruma(*p.Regex)
		if err == nil {
			var re *regexp.Regexp
			if re, err = regexp.Compile(expr); err == nil {
				return regexpMatcher{re}, nil
			}
		}
		return nil, fmt.Errorf("regex %q is not one of DeepSeek's patterns and Go's regexp cannot run it: %w", *p.Regex, err)
	}
	return nil, errors.New(`pattern must have exactly one of "String" and "Regex"`)
}

// literal matches occurrences of a fixed string; an empty one matches nothing.
type literal string

func (l literal) matches(dst [][2]int, s string) [][2]int {
	if l == "" {
		return dst
	}
	for i := 0; ; {
		j := strings.Index(s[i:], string(l))
		if j < 0 {
			return dst
		}
		i += j
		dst = append(dst, [2]int{i, i + len(l)})
		i += len(l)
	}
}

type regexpMatcher struct{ re *regexp.Regexp }

func (m regexpMatcher) matches(dst [][2]int, s string) [][2]int {
	for _, loc := range m.re.FindAllStringIndex(s, -1) {
		dst = append(dst, [2]int{loc[0], loc[1]})
	}
	return dst
}

// oniSpace is Oniguruma's \s in UTF-8 mode written for RE2: White_Space,
// which is \t-\r, U+0085 and the Z categories. RE2's \s is ASCII only.
const oniSpace = `\t-\r\x{85}\p{Z}`

// translateOniguruma rewrites a tokenizers regex (Oniguruma, Ruby syntax)
// into Go regexp syntax with the same meaning: \s, \S, \d and \D get their
// Unicode classes, \uHHHH becomes \x{HHHH}, and ^ and $ become line
// anchors, as they are in Ruby syntax. Constructs whose meaning differs and
// cannot be rewritten are errors: nested classes and && in a class, \b, \h,
// \S inside a class, and \w and \W, whose Oniguruma class is not the same
// inside brackets as outside. Constructs RE2 lacks (lookaround,
// backreferences, possessive repetition) are left for regexp.Compile to
// reject.
func translateOniguruma(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\\':
			if i+1 == len(p) {
				return "", errors.New("trailing backslash")
			}
			n, err := translateEscape(&b, p[i:], inClass)
			if err != nil {
				return "", err
			}
			i += n
			continue
		case inClass && c == '[':
			return "", errors.New("nested character classes and POSIX brackets differ between Oniguruma and RE2")
		case inClass && strings.HasPrefix(p[i:], "&&"):
			return "", errors.New("class intersection (&&) has no RE2 equivalent")
		case inClass && c == ']':
			inClass = false
		case c == '[':
			inClass = true
			b.WriteByte(c)
			i++
			if strings.HasPrefix(p[i:], "^") {
				b.WriteByte('^')
				i++
			}
			if strings.HasPrefix(p[i:], "]") { // a leading ] is literal in both
				b.WriteByte(']')
				i++
			}
			continue
		case !inClass && c == '^':
			b.WriteString(`(?m:^)`)
			i++
			continue
		case !inClass && c == '$':
			b.WriteString(`(?m:$)`)
			i++
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), nil
}

// translateEscape writes the RE2 form of the escape at the start of p and
// returns how many bytes of p it consumed.
func translateEscape(b *strings.Builder, p string, inClass bool) (int, error) {
	e := p[1]
	switch e {
	case 's', 'S':
		switch {
		case inClass && e == 'S':
			return 0, errors.New(`\S inside a character class has no RE2 equivalent`)
		case inClass:
			b.WriteString(oniSpace)
		case e == 'S':
			b.WriteString("[^" + oniSpace + "]")
		default:
			b.WriteString("[" + oniSpace + "]")
		}
		return 2, nil
	case 'd':
		b.WriteString(`\p{Nd}`)
		return 2, nil
	case 'D':
		b.WriteString(`\P{Nd}`)
		return 2, nil
	case 'w', 'W', 'b', 'B', 'h', 'H', 'G', 'Z', 'R', 'X', 'K', 'k', 'g':
		return 0, fmt.Errorf(`Oniguruma escape \%c has no RE2 equivalent`, e)
	case 'u':
		if len(p) < 6 || strings.Trim(p[2:6], "0123456789abcdefABCDEF") != "" {
			return 0, errors.New(`\u must be followed by four hex digits`)
		}
		b.WriteString(`\x{` + p[2:6] + `}`)
		return 6, nil
	case 'p', 'P':
		// Copy the property verbatim: a ^ in \p{^L} is not an anchor.
		if len(p) > 2 && p[2] == '{' {
			if end := strings.IndexByte(p, '}'); end > 0 {
				b.WriteString(p[:end+1])
				return end + 1, nil
			}
		}
	}
	b.WriteString(p[:2])
	return 2, nil
}

// behavior is a Split's SplitDelimiterBehavior.
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{
	"Removed":            removed,
	"Isolated":           isolated,
	"MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext":     mergedWithNext,
	"Contiguous":         contiguous,
}

// A segment is a byte range of a piece and whether the pattern matched it.
type segment struct {
	start, end int
	match      bool
}

// split is one Split pre-tokenizer.
type split struct {
	pattern  matcher
	behavior behavior
	invert   bool
}

// segments cuts s into the pieces the Split makes of it, reusing buffers.
// It follows tokenizers' NormalizedString::split: matches and the gaps
// between them (match flags flipped when inverted), folded by the behavior.
// Empty pieces may remain; the caller drops them.
func (sp *split) segments(segs []segment, ranges [][2]int, s string) ([]segment, [][2]int) {
	ranges = sp.pattern.matches(ranges[:0], s)
	segs = segs[:0]
	prev := 0
	for _, m := range ranges {
		if prev != m[0] {
			segs = append(segs, segment{prev, m[0], sp.invert})
		}
		segs = append(segs, segment{m[0], m[1], !sp.invert})
		prev = m[1]
	}
	if prev != len(s) {
		segs = append(segs, segment{prev, len(s), sp.invert})
	}
	return sp.behavior.fold(segs), ranges
}

// fold applies the behavior to segments in place.
func (b behavior) fold(segs []segment) []segment {
	out := segs[:0]
	switch b {
	case removed:
		for _, sg := range segs {
			if !sg.match {
				out = append(out, sg)
			}
		}
	case isolated:
		out = segs
	case mergedWithPrevious:
		prevMatch := false
		for _, sg := range segs {
			if sg.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sg.end
			} else {
				out = append(out, sg)
			}
			prevMatch = sg.match
		}
	case mergedWithNext:
		// Walk backwards, merging a match into the piece after it, then
		// restore the order.
		prevMatch := false
		n := 0
		for i := len(segs) - 1; i >= 0; i-- {
			sg := segs[i]
			if sg.match && !prevMatch && n > 0 {
				segs[len(segs)-n].start = sg.start
			} else {
				n++
				segs[len(segs)-n] = sg
			}
			prevMatch = sg.match
		}
		out = append(out, segs[len(segs)-n:]...)
	case contiguous:
		for i, sg := range segs {
			if i > 0 && sg.match == out[len(out)-1].match {
				out[len(out)-1].end = sg.end
			} else {
				out = append(out, sg)
			}
		}
	}
	return out
}

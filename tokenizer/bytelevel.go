package tokenizer

import "unicode/utf8"

// byteRune is GPT-2's bytes_to_unicode map: printable Latin-1 bytes stand
// for themselves and the other 68 bytes are moved to U+0100..U+0143, so that
// every byte string can be spelled as printable text in a JSON vocabulary.
var byteRune [256]rune

// runeByte inverts byteRune; entries for runes outside the alphabet are -1.
var runeByte [256 + 68]int16

func init() {
	next := rune(256)
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = next
			next++
		}
	}
	for r := range runeByte {
		runeByte[r] = -1
	}
	for b, r := range byteRune {
		runeByte[r] = int16(b)
	}
}

// byteLevelBytes returns the bytes a byte-level spelling stands for, and
// false if a character of it is outside the alphabet.
func byteLevelBytes(spelling string) ([]byte, bool) {
	out := make([]byte, 0, len(spelling))
	for _, r := range spelling {
		if r < 0 || int(r) >= len(runeByte) || runeByte[r] < 0 {
			return nil, false
		}
		out = append(out, byte(runeByte[r]))
	}
	return out, true
}

// byteLevelSpelling maps raw bytes to their byte-level spelling.
func byteLevelSpelling(b []byte) string {
	out := make([]rune, len(b))
	for i, c := range b {
		out[i] = byteRune[c]
	}
	return string(out)
}

// decodedPiece is what the ByteLevel decoder makes of one token: the bytes
// its spelling stands for, or, when a character is outside the byte alphabet
// (special tokens such as <｜begin▁of▁sentence｜>), its text unchanged.
func decodedPiece(spelling string) string {
	if b, ok := byteLevelBytes(spelling); ok {
		return string(b)
	}
	return spelling
}

// lossyUTF8 returns s with each maximal ill-formed subsequence replaced by
// U+FFFD, the policy of Rust's String::from_utf8_lossy (which the ByteLevel
// decoder applies) and of Python's bytes.decode(errors="replace"). Go's
// strings.ToValidUTF8 differs: it replaces a whole run of bad bytes once.
func lossyUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, s[i:i+n]...)
			i += n
			continue
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return string(out)
}

// maximalSubpart returns the length of the ill-formed sequence at the start
// of s: the longest prefix that could begin a well-formed UTF-8 sequence, or
// one byte.
func maximalSubpart(s string) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := s[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c >= 0xE0 && c <= 0xEF:
		need = 2
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		need = 3
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(s); n++ {
		if s[n] < lo || s[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

package tokenizer

import (
	"strings"
	"testing"
)

// Encoding throughput, reported as MB/s of input text:
//
//	go test -run '^$' -bench . ./tokenizer
//
// "sample" repeats the synthesizer's mixed sample (code, prose, CJK), so
// the word cache mostly hits; "random" is text from the property tests'
// palette, where most pre-tokens are new.
func BenchmarkEncode(b *testing.B) {
	tok := mustSynthesized(b)
	r, _ := newRand(b)
	var rnd strings.Builder
	for rnd.Len() < 1<<16 {
		rnd.WriteString(randomText(r, 64))
	}
	for _, in := range []struct{ name, text string }{
		{"sample", strings.Repeat(synthSample, (1<<16)/len(synthSample)+1)},
		{"random", rnd.String()},
	} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.text)))
			for b.Loop() {
				encodeAll(tok, in.text, false)
			}
		})
	}
}

// BenchmarkPreTokenize measures DeepSeek's three Splits alone.
func BenchmarkPreTokenize(b *testing.B) {
	tok := mustSynthesized(b)
	text := strings.Repeat(synthSample, (1<<16)/len(synthSample)+1)
	b.SetBytes(int64(len(text)))
	e := encoder{t: tok, bufs: make([]splitBufs, len(tok.splits)+1)}
	words := 0
	e.word = func(string) { words++ }
	for b.Loop() {
		e.pretokenize(text, 0)
	}
}

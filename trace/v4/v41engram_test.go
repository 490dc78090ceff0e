package v4

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/tokenizer"
)

// TestEngramMultipliersReleased checks the numpy port against the values
// numpy 1.24 draws for the released layer ids (V4.md §3.10: bound from
// the released 99,092 compressed ids).
func TestEngramMultipliersReleased(t *testing.T) {
	for _, tc := range []struct {
		layer int
		want  []int64
	}{
		{1, []int64{76632096046245, 4839876093313, 35959672319349, 73987337458391}},
		{14, []int64{67716810739261, 51510806800915, 30921347202721, 82619226485591}},
	} {
		if got := EngramMultipliers(tc.layer, 4, 99092); !slices.Equal(got, tc.want) {
			t.Errorf("layer %d: multipliers %v, want %v", tc.layer, got, tc.want)
		}
	}
}

// TestEngramPrimesReleased checks the released layout's primes: the
// per-layer sums are engram_num_embeddings of V4.1-Flash.
func TestEngramPrimesReleased(t *testing.T) {
	p := EngramPrimes(2, 4, 8, 16000000)
	want := []int64{384006168, 384016682}
	for i, ps := range p {
		var s int64
		for _, v := range ps {
			s += v
		}
		if s != want[i] {
			t.Errorf("layer index %d: primes sum to %d, want %d", i, s, want[i])
		}
	}
	if !slices.Equal(p[0][:3], []int64{16000057, 16000079, 16000081}) || p[1][len(p[1])-1] != 16000889 {
		t.Errorf("primes start %v and end %d", p[0][:3], p[1][len(p[1])-1])
	}
}

func TestEngramNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"The", "the"},
		{" THE", "the"},   // Strip
		{"é", "e"},        // NFD + StripAccents (precomposed)
		{"e\u0301", "e"},  // combining
		{"ﬁ", "fi"},       // NFKC ligature
		{"Ａ", "a"},        // fullwidth
		{"①", "1"},        // circled digit
		{"½", "1⁄2"},      // NFKC fraction
		{"İ", "i"},        // NFD first, so no dotted i survives
		{"ẞ", "ß"},        // capital sharp s lowercases to ß
		{"Ω", "ω"},        // Ohm sign: NFKC to Omega, then lower
		{"K", "k"},        // Kelvin sign
		{" ", " "},        // one space survives through the sentinel
		{"\t\n", " "},     // whitespace runs
		{"  \t", " "},     // runs to one space, kept
		{"a \t b", "a b"}, // inner run
		{"\u3000", " "},   // ideographic space: NFKC space
		{"\u00a0", " "},   // NBSP
		{"\u0301", ""},    // lone accent normalises to nothing
		{"\v", ""},        // vertical tab is stripped (White_Space)
		{"Σσς", "σσς"},    // no final-sigma rule
	} {
		if got := EngramNormalize(tc.in); got != tc.want {
			t.Errorf("EngramNormalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Lowercase("\u0130"); got != "i\u0307" {
		t.Errorf("Lowercase(U+0130) = %q", got)
	}
	if got := StripAccents("a\u0301\u20dd\u0903b"); got != "ab" {
		t.Errorf("StripAccents kept a mark: %q", got)
	}
}

// TestEngramTinyLayout builds the map, primes, offsets and multipliers of
// testdata/trace/v41-tiny and compares them with the reference's.
func TestEngramTinyLayout(t *testing.T) {
	_, g := loadGolden41(t)
	dir := filepath.Join(testdata.Dir(t), "trace", "v41-tiny")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(tj)
	if err != nil {
		t.Fatal(err)
	}
	m, n := CompressedTokenMap(tok)
	ge := g.Derived.Engram
	if n != ge.CompressedVocabSize {
		t.Errorf("map size %d, want %d", n, ge.CompressedVocabSize)
	}
	for i := range min(len(m), len(ge.Map)) {
		if m[i] != ge.Map[i] {
			t.Errorf("token %d (%q): compressed id %d, want %d", i, tok.Piece(i), m[i], ge.Map[i])
		}
	}
	if len(m) != len(ge.Map) {
		t.Fatalf("map of %d ids, want %d", len(m), len(ge.Map))
	}
	m41, _ := loadGolden41(t)
	e := m41.Engram
	if e == nil {
		t.Fatalf("no Engram layout: %s", m41.EngramProblem)
	}
	for li := range ge.Multipliers {
		if !slices.Equal(e.Multipliers[li], ge.Multipliers[li]) {
			t.Errorf("layer index %d: multipliers %v, want %v", li, e.Multipliers[li], ge.Multipliers[li])
		}
		var flat []int64
		for _, o := range ge.Primes[li] {
			flat = append(flat, o...)
		}
		if !slices.Equal(e.Primes[li], flat) {
			t.Errorf("layer index %d: primes %v, want %v", li, e.Primes[li], flat)
		}
		if !slices.Equal(e.Offsets[li], ge.Offsets[li]) {
			t.Errorf("layer index %d: offsets %v, want %v", li, e.Offsets[li], ge.Offsets[li])
		}
	}
	if e.PadID != int32(ge.CompressedPadID) {
		t.Errorf("compressed pad id %d, want %d", e.PadID, ge.CompressedPadID)
	}
}

// BenchmarkEngramLayout times what mounting a V4.1 checkpoint computes
// for Engram: v41-tiny's token map (640 ids; the released tokenizer has
// 129,280, so about 200 times this) and the released layout's 48 primes.
func BenchmarkEngramLayout(b *testing.B) {
	tj, err := os.ReadFile(filepath.Join(testdata.Dir(b), "trace", "v41-tiny", "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	tok, err := tokenizer.Parse(tj)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("map", func(b *testing.B) {
		for range b.N {
			CompressedTokenMap(tok)
		}
	})
	b.Run("primes", func(b *testing.B) {
		for range b.N {
			EngramPrimes(2, 4, 8, 16000000)
		}
	})
}

// BenchmarkEngramHashReleased is what mounting trace/ of the released
// layout spends on Engram: building the token map, primes and multipliers
// from v41-full-sparse's 129,280-id tokenizer (5.2 MB of tokenizer.json,
// parsed once for the prompts and the map) and the config.
func BenchmarkEngramHashReleased(b *testing.B) {
	dir := b.TempDir()
	if err := synth.Write("v41-full-sparse", dir); err != nil {
		b.Fatal(err)
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	cfg, err := ParseConfig41(read("config.json"), read(filepath.Join("inference", "config.json")))
	if err != nil {
		b.Fatal(err)
	}
	tok, err := tokenizer.Parse(read("tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		e, err := NewEngramHash(cfg, tok)
		if err != nil {
			b.Fatal(err)
		}
		if len(e.Map) != 129280 || e.MapSize != 99092 {
			b.Fatalf("map of %d ids into %d", len(e.Map), e.MapSize)
		}
	}
}

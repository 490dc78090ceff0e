package v4

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/tokenizer"
)

// EngramHash is V4.1's n-gram hashing layout, built as DeepSeek's
// engram.py builds it: the compressed token map from the checkpoint's
// tokenizer, the per-layer primes and row offsets, and the multipliers.
type EngramHash struct {
	// Map sends a token id to its compressed id; MapSize is the number of
	// compressed ids (checked against engram_compressed_vocab_size).
	Map     []int32 `json:"-"`
	MapSize int     `json:"compressed_vocab_size"`
	PadID   int32   `json:"compressed_pad_id"`
	// Per Engram layer, in engram_layer_ids order: Primes and Offsets
	// [(max_ngram-1)·heads] (order-major, head-minor), Multipliers
	// [max_ngram].
	Primes      [][]int64 `json:"primes"`
	Offsets     [][]int64 `json:"offsets"`
	Multipliers [][]int64 `json:"multipliers"`
}

// NewEngramHash builds the hashing layout of cfg's Engram layers from the
// checkpoint's tokenizer, checking the map's size and the primes' sums
// against the configuration (a mismatch would silently rehash every table
// row).
func NewEngramHash(cfg *Config41, tok *tokenizer.Tokenizer) (*EngramHash, error) {
	e := &EngramHash{}
	e.Map, e.MapSize = CompressedTokenMap(tok)
	if e.MapSize != cfg.EngramCompressedSize {
		return nil, fmt.Errorf("tokenizer.json: the Engram token map has %d compressed ids, engram_compressed_vocab_size says %d", e.MapSize, cfg.EngramCompressedSize)
	}
	if cfg.EngramPadID >= len(e.Map) {
		return nil, fmt.Errorf("tokenizer.json: engram_pad_id %d is outside its %d tokens", cfg.EngramPadID, len(e.Map))
	}
	e.PadID = e.Map[cfg.EngramPadID]
	e.Primes = EngramPrimes(len(cfg.EngramLayers), cfg.EngramMaxNgram, cfg.EngramHeads, cfg.EngramVocab)
	for i, ps := range e.Primes {
		var sum, off int64
		offs := make([]int64, len(ps))
		for j, p := range ps {
			offs[j] = off
			off += p
			sum += p
		}
		if sum != int64(cfg.EngramNumEmbeddings[i]) {
			return nil, fmt.Errorf("Engram layer %d: its primes sum to %d rows, engram_num_embeddings says %d", cfg.EngramLayers[i], sum, cfg.EngramNumEmbeddings[i])
		}
		e.Offsets = append(e.Offsets, offs)
		e.Multipliers = append(e.Multipliers, EngramMultipliers(cfg.EngramLayers[i], cfg.EngramMaxNgram, e.MapSize))
	}
	return e, nil
}

// CompressedTokenMap is engram.py's build_compressed_token_map: each id's
// decoded text, normalised by EngramNormalize (or its raw token string
// when the text holds U+FFFD, or the text itself when it normalises to
// nothing), numbered in first-seen order.
func CompressedTokenMap(tok *tokenizer.Tokenizer) ([]int32, int) {
	n := tok.VocabSize()
	out := make([]int32, n)
	ids := map[string]int32{}
	for id := range n {
		text := tok.Decode([]int{id})
		var key string
		if strings.ContainsRune(text, unicode.ReplacementChar) {
			key = tok.Token(id)
		} else if key = EngramNormalize(text); key == "" {
			key = text
		}
		v, ok := ids[key]
		if !ok {
			v = int32(len(ids))
			ids[key] = v
		}
		out[id] = v
	}
	return out, len(ids)
}

var whitespaceRun = regexp.MustCompile(`[ \t\r\n]+`)

// engramSentinel keeps a token that is exactly one space from being
// stripped to nothing.
const engramSentinel = "\ue000"

// EngramNormalize is the normaliser sequence of build_compressed_token_map
// (Hugging Face tokenizers' NFKC, NFD, StripAccents, Lowercase, Replace
// of whitespace runs by one space, "^ $" by a sentinel, Strip, the
// sentinel back to a space).
func EngramNormalize(s string) string {
	s = norm.NFKC.String(s)
	s = norm.NFD.String(s)
	s = StripAccents(s)
	s = Lowercase(s)
	s = whitespaceRun.ReplaceAllString(s, " ")
	if s == " " {
		s = engramSentinel
	}
	s = strings.TrimFunc(s, unicode.IsSpace)
	return strings.ReplaceAll(s, engramSentinel, " ")
}

// StripAccents drops every combining mark (General Category Mn, Mc, Me),
// as tokenizers' StripAccents does.
func StripAccents(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.M, r) {
			return -1
		}
		return r
	}, s)
}

// Lowercase lowercases character by character, as tokenizers' Lowercase
// (Rust's char::to_lowercase, without the final-sigma rule). The one
// character whose full lowercase mapping has two characters, U+0130, is
// spelled out; after NFD it never reaches here.
func Lowercase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\u0130' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// EngramPrimes is EngramLayout.from_args' primes: for each of layers
// Engram layers and each n-gram order 2..maxNgram, heads primes, each the
// smallest prime above the previous (starting from vocab-1 for each
// order) not handed out before, in any layer.
func EngramPrimes(layers, maxNgram, heads, vocab int) [][]int64 {
	seen := map[int64]bool{}
	out := make([][]int64, layers)
	for l := range layers {
		for range maxNgram - 1 {
			cur := int64(vocab - 1)
			for range heads {
				cur++
				for !big.NewInt(cur).ProbablyPrime(0) || seen[cur] {
					cur++
				}
				seen[cur] = true
				out[l] = append(out[l], cur)
			}
		}
	}
	return out
}

// EngramMultipliers is compute_hash_multipliers for one layer: numpy's
// default_rng(10007·layer).integers(0, bound, maxNgram, int64) with
// bound = (INT64_MAX // compressedVocab) // 2, each v made 2v+1. The
// generator is ported (SeedSequence, PCG64, Lemire's bounded draw).
func EngramMultipliers(layer, maxNgram, compressedVocab int) []int64 {
	bound := max(1, (math.MaxInt64/int64(compressedVocab))/2)
	g := newPCG64(uint64(10007 * layer))
	out := make([]int64, maxNgram)
	for i := range out {
		out[i] = 2*int64(g.bounded(uint64(bound-1))) + 1
	}
	return out
}

// seedSequence32 is numpy's SeedSequence(entropy).generate_state(n,
// uint32) for a non-negative integer entropy and no spawn key.
func seedSequence32(entropy uint64, n int) []uint32 {
	const (
		initA, multA = 0x43b0d7e5, 0x931e8875
		initB, multB = 0x8b51f9dd, 0x58f38ded
		mixL, mixR   = 0xca01f9dd, 0x4973f715
		poolSize     = 4
	)
	// The entropy as little-endian 32-bit words (at least one).
	words := []uint32{uint32(entropy)}
	if hi := uint32(entropy >> 32); hi != 0 {
		words = append(words, hi)
	}
	hashConst := uint32(initA)
	hashmix := func(v uint32) uint32 {
		v ^= hashConst
		hashConst *= multA
		v *= hashConst
		return v ^ v>>16
	}
	mix := func(x, y uint32) uint32 {
		r := mixL*x - mixR*y
		return r ^ r>>16
	}
	var pool [poolSize]uint32
	for i := range pool {
		var v uint32
		if i < len(words) {
			v = words[i]
		}
		pool[i] = hashmix(v)
	}
	for src := range pool {
		for dst := range pool {
			if src != dst {
				pool[dst] = mix(pool[dst], hashmix(pool[src]))
			}
		}
	}
	out := make([]uint32, n)
	hc := uint32(initB)
	for i := range out {
		v := pool[i%poolSize]
		v ^= hc
		hc *= multB
		v *= hc
		out[i] = v ^ v>>16
	}
	return out
}

// pcg64 is numpy's PCG64 (128-bit LCG, XSL-RR output).
type pcg64 struct{ stHi, stLo, incHi, incLo uint64 }

// PCG's default 128-bit multiplier.
const pcgMulHi, pcgMulLo = 0x2360ED051FC65DA4, 0x4385DF649FCCF645

// newPCG64 seeds as numpy's PCG64(SeedSequence(seed)): four uint64 words
// of state, seed = w0:w1 and increment sequence = w2:w3.
func newPCG64(seed uint64) *pcg64 {
	s := seedSequence32(seed, 8)
	w := func(i int) uint64 { return uint64(s[2*i]) | uint64(s[2*i+1])<<32 }
	g := &pcg64{}
	// inc = (initseq << 1) | 1
	g.incHi = w(2)<<1 | w(3)>>63
	g.incLo = w(3)<<1 | 1
	g.step()
	var c uint64
	g.stLo, c = bits.Add64(g.stLo, w(1), 0)
	g.stHi, _ = bits.Add64(g.stHi, w(0), c)
	g.step()
	return g
}

// step is state = state·mult + inc (mod 2^128).
func (g *pcg64) step() {
	hi, lo := bits.Mul64(g.stLo, pcgMulLo)
	hi += g.stHi*pcgMulLo + g.stLo*pcgMulHi
	var c uint64
	g.stLo, c = bits.Add64(lo, g.incLo, 0)
	g.stHi, _ = bits.Add64(hi, g.incHi, c)
}

// next64 steps, then outputs rotr(hi ^ lo, hi >> 58).
func (g *pcg64) next64() uint64 {
	g.step()
	return bits.RotateLeft64(g.stHi^g.stLo, -int(g.stHi>>58))
}

// bounded is numpy's bounded_lemire_uint64: a uniform draw from
// [0, rng] (rng above 2^32 - 1 here; smaller ranges take numpy's buffered
// 32-bit path, which Engram's bounds never reach).
func (g *pcg64) bounded(rng uint64) uint64 {
	excl := rng + 1
	hi, lo := bits.Mul64(g.next64(), excl)
	if lo < excl {
		threshold := -excl % excl
		for lo < threshold {
			hi, lo = bits.Mul64(g.next64(), excl)
		}
	}
	return hi
}

// Hash returns the hash ids (table rows, offsets included) of every
// position of one sequence for Engram layer index li:
// [len(ids), (max_ngram-1)·heads], columns order-major, head-minor. Look
// back stops at the sequence start (the pad id fills in); text prompts
// have no dead (image) tokens.
func (e *EngramHash) Hash(li int, ids []int, maxNgram, heads int) []int32 {
	cols := (maxNgram - 1) * heads
	out := make([]int32, len(ids)*cols)
	mult, primes, offs := e.Multipliers[li], e.Primes[li], e.Offsets[li]
	for p := range ids {
		rolling := int64(0)
		for s := range maxNgram {
			tok := int64(e.PadID)
			if p >= s {
				tok = int64(e.Map[ids[p-s]])
			}
			prod := tok * mult[s]
			if s == 0 {
				rolling = prod
				continue
			}
			rolling ^= prod
			for h := range heads {
				c := (s-1)*heads + h
				out[p*cols+c] = int32(rolling%primes[c] + offs[c])
			}
		}
	}
	return out
}

// engramRow reads table row r dequantised (E4M3 times its E8M0 scale per
// 32, rounded to BF16 as the reference's lookup is) into dst.
func (e *engramTensors) row(dst []float32, r int) error {
	if r < 0 || r >= e.rows {
		return fmt.Errorf("Engram row %d outside the table's %d rows", r, e.rows)
	}
	v := make([]byte, e.headDim)
	if _, err := e.table.ReadAt(v, int64(r)*int64(e.headDim)); err != nil {
		return tensorErr(e.table, err)
	}
	s := make([]byte, e.headDim/e.scaleBy)
	if _, err := e.scale.ReadAt(s, int64(r)*int64(len(s))); err != nil {
		return tensorErr(e.scale, err)
	}
	for i, b := range v {
		dst[i] = codecs.BF16ToFloat32(codecs.Float32ToBF16(codecs.E4M3ToFloat32(b) * codecs.E8M0ToFloat32(s[i/e.scaleBy])))
	}
	return nil
}

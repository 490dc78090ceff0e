package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// maxTokenID bounds token ids, so that a corrupt file cannot make Parse
// allocate id tables of arbitrary size; real vocabularies are far smaller.
const maxTokenID = 1 << 24

// idSlack is how far past the number of vocabulary entries an id may lie:
// real vocabularies number their tokens densely, and a few holes are
// harmless, but a handful of entries claiming huge ids would make the id
// tables cost far more than the file.
const idSlack = 1 << 16

// Tokenizer encodes text to token ids and back. It is safe for concurrent
// use once loaded; LoadConfig and ParseConfig must be called before it is
// shared.
type Tokenizer struct {
	model       bpe
	rawAdded    *addedSet // added tokens matched in the raw text
	normAdded   *addedSet // added tokens matched after normalization
	normalizers []func(s string, limit int) (string, error)
	splits      []split
	prefixSpace bool // ByteLevel add_prefix_space
	gpt2Split   bool // ByteLevel use_regex

	vocab   map[string]int // model vocabulary: spelling -> id
	added   map[string]int // added tokens: content -> id
	spell   []string       // id -> spelling ("" for unused ids)
	decoded []string       // id -> what the ByteLevel decoder makes of it

	prefix, suffix []int // ids Encode adds around the text

	// What Vocab needs beyond the tables above: the added tokens as
	// resolved, how many merges the file lists (repeats included), and
	// whether an added token took the id of a model token spelled
	// otherwise.
	addedList []addedToken
	nMerges   int
	respelled bool

	// piece bounds the bytes of normalized text one token can stand for:
	// the longest spelling or added content (MaxTextBytes when runs of
	// unknown characters fuse into one token).
	piece int
}

// MaxTextBytes bounds every text Encode holds, as given or as normalized:
// a Replace normalizer can multiply a text's length, and a chain of them
// would otherwise grow it past any memory. It is the size of the largest
// prompts file trace/ reads.
const MaxTextBytes = 4 << 20

// maxAddedBytes bounds the contents of the added tokens matched after
// normalization, as the normalizers make them at load, all together: the
// matcher holds a node per byte. DeepSeek-V3's 800 added tokens hold 12
// KB.
const maxAddedBytes = 256 << 10

// ErrTooLong is wrapped by the errors of texts that grow past a bound.
var ErrTooLong = errors.New("text too long")

// MaxFileSize bounds what Load and LoadConfig read: DeepSeek's
// tokenizer.json is under 8 MB, and parsing costs a small multiple of the
// file in memory.
const MaxFileSize = 64 << 20

// Load reads a tokenizer.json file of at most MaxFileSize bytes.
func Load(path string) (*Tokenizer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// readFile reads a regular file of at most MaxFileSize bytes, refusing a
// larger one (a sparse file of any size costs nothing to make) by its size
// before reading, and reading no more than the bound if it grows.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	tooBig := fmt.Errorf("%s: %d bytes, more than the %d bytes a tokenizer file may have", path, fi.Size(), MaxFileSize)
	if fi.Size() > MaxFileSize {
		return nil, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, tooBig
	}
	return data, nil
}

type fileJSON struct {
	Truncation    json.RawMessage `json:"truncation"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// componentJSON holds the fields of every normalizer, pre-tokenizer,
// post-processor and decoder this package understands; Type says which.
type componentJSON struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	Pattern  *patternJSON `json:"pattern"`  // Split, Replace
	Behavior string       `json:"behavior"` // Split
	Invert   bool         `json:"invert"`   // Split
	Content  string       `json:"content"`  // Replace

	AddPrefixSpace *bool `json:"add_prefix_space"` // ByteLevel
	UseRegex       *bool `json:"use_regex"`        // ByteLevel

	Single        []map[string]struct{ ID string } `json:"single"`         // TemplateProcessing
	SpecialTokens map[string]struct{ IDs []int }   `json:"special_tokens"` // TemplateProcessing
}

// isNull reports whether a JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func component(raw json.RawMessage) (componentJSON, error) {
	var c componentJSON
	err := json.Unmarshal(raw, &c)
	return c, err
}

// Parse reads the contents of a tokenizer.json file. It accepts byte-level
// BPE models with the normalizers, pre-tokenizers, post-processors and
// decoders DeepSeek's files use, and returns an error naming anything else.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if !isNull(f.Truncation) {
		return nil, errors.New("truncation is not supported")
	}
	t := &Tokenizer{}
	pairs, err := t.parseModel(&f.Model)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	t.nMerges = len(pairs)
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if t.addedList, err = t.resolveAdded(f.AddedTokens); err != nil {
		return nil, fmt.Errorf("added_tokens: %w", err)
	}
	if err := t.indexAdded(t.addedList); err != nil {
		return nil, fmt.Errorf("added_tokens: %w", err)
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	if err := parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	t.decoded = make([]string, len(t.spell))
	for id, s := range t.spell {
		t.decoded[id] = decodedPiece(s)
		t.piece = max(t.piece, len(s), 1)
	}
	if t.model.unk >= 0 && t.model.fuseUnk {
		t.piece = MaxTextBytes
	}
	return t, nil
}

// parseModel reads the model: its vocabulary (refusing two spellings of
// one id, which tokenizers would resolve by hash order), byte tokens, unk
// token and merges, which it returns in rank order.
func (t *Tokenizer) parseModel(m *modelJSON) ([][2]string, error) {
	switch {
	case m.Type != "BPE" && m.Type != "":
		return nil, fmt.Errorf("type %q: only BPE is supported", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, errors.New("dropout is not supported: encoding would not be deterministic")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, errors.New("continuing_subword_prefix and end_of_word_suffix are not supported in a byte-level BPE")
	case m.ByteFallback:
		return nil, errors.New("byte_fallback is set: tokens are spelled <0xNN>, not in the byte-level alphabet")
	case len(m.Vocab) == 0:
		return nil, errors.New("empty vocab")
	}
	t.vocab = m.Vocab
	maxID := -1
	limit := min(maxTokenID, len(m.Vocab)+idSlack)
	for s, id := range m.Vocab {
		if id < 0 || id >= limit {
			return nil, fmt.Errorf("token %q has id %d, outside [0, %d) for a vocabulary of %d tokens", s, id, limit, len(m.Vocab))
		}
		maxID = max(maxID, id)
	}
	t.spell = make([]string, maxID+1)
	taken := make([]bool, maxID+1)
	shared := -1 // the least id with two spellings
	for s, id := range m.Vocab {
		if taken[id] && (shared < 0 || id < shared) {
			shared = id
		}
		t.spell[id], taken[id] = s, true
	}
	if shared >= 0 {
		var names []string
		for s, id := range m.Vocab {
			if id == shared {
				names = append(names, strconv.Quote(s))
			}
		}
		slices.Sort(names)
		return nil, fmt.Errorf("tokens %s share id %d: tokenizers would pick one by hash order, so no reader can agree on it", strings.Join(names, " and "), shared)
	}

	b := &t.model
	for c := range 256 {
		b.byteID[c] = -1
		if id, ok := m.Vocab[string(byteRune[c])]; ok {
			b.byteID[c] = int32(id)
		}
	}
	b.unk, b.fuseUnk = -1, m.FuseUnk
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocab", *m.UnkToken)
		}
		b.unk = int32(id)
	}
	if m.IgnoreMerges {
		b.whole = make(map[string]int32, len(m.Vocab))
		for s, id := range m.Vocab {
			if raw, ok := byteLevelBytes(s); ok {
				b.whole[string(raw)] = int32(id)
			}
		}
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = make(map[uint64]merge, len(pairs))
	for rank, p := range pairs {
		a, ok1 := m.Vocab[p[0]]
		c, ok2 := m.Vocab[p[1]]
		id, ok3 := m.Vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("merge %d (%q %q): token or result not in the vocab", rank, p[0], p[1])
		}
		// A repeated pair takes its last rank, as tokenizers' HashMap does.
		b.merges[pairKey(int32(a), int32(c))] = merge{int32(rank), int32(id)}
	}
	return pairs, nil
}

// parseMerges reads merges in either form tokenizers writes: "a b" strings
// (older files, DeepSeek's) or ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err == nil {
		pairs := make([][2]string, len(lines))
		for i, l := range lines {
			a, b, ok := strings.Cut(l, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("merge %d %q is not two tokens separated by a space", i, l)
			}
			pairs[i] = [2]string{a, b}
		}
		return pairs, nil
	}
	var lists [][]string
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, errors.New(`merges must be a list of "a b" strings or of ["a", "b"] pairs`)
	}
	pairs := make([][2]string, len(lists))
	for i, l := range lists {
		if len(l) != 2 {
			return nil, fmt.Errorf("merge %d has %d tokens, want 2", i, len(l))
		}
		pairs[i] = [2]string{l[0], l[1]}
	}
	return pairs, nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	c, err := component(raw)
	if err != nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.parseNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	case "Replace":
		if c.Pattern == nil {
			return errors.New("Replace without a pattern")
		}
		m, err := c.Pattern.compile()
		if err != nil {
			return fmt.Errorf("Replace: %w", err)
		}
		t.normalizers = append(t.normalizers, replacer(m, c.Content))
		return nil
	}
	return fmt.Errorf("type %q is not supported: only Sequence and Replace are", c.Type)
}

// replacer returns the Replace normalizer: every match becomes content.
// It refuses, before building it, an output longer than limit bytes.
func replacer(m matcher, content string) func(s string, limit int) (string, error) {
	return func(s string, limit int) (string, error) {
		ranges := m.matches(nil, s)
		if len(ranges) == 0 {
			return s, nil
		}
		n := len(s)
		for _, r := range ranges {
			n += len(content) - (r[1] - r[0])
			if n > limit {
				return "", fmt.Errorf("%w: a Replace normalizer grows %d bytes past %d", ErrTooLong, len(s), limit)
			}
		}
		var b strings.Builder
		b.Grow(n)
		prev := 0
		for _, r := range ranges {
			b.WriteString(s[prev:r[0]])
			b.WriteString(content)
			prev = r[1]
		}
		b.WriteString(s[prev:])
		return b.String(), nil
	}
}

// normalize runs the normalizers on s, failing as soon as one would make
// more than limit bytes.
func (t *Tokenizer) normalize(s string, limit int) (string, error) {
	for _, n := range t.normalizers {
		var err error
		if s, err = n(s, limit); err != nil {
			return "", err
		}
	}
	return s, nil
}

// resolveAdded gives the added tokens their ids the way tokenizers'
// AddedVocabulary::add_tokens does when it loads a file: a token already
// in the vocabulary keeps its id there, and a new one gets the next id
// after the vocabulary or after the largest added id, whatever the file's
// "id" says (tokenizers only warns about a difference). A repeated
// content keeps its id and takes the later flags; an empty one is
// ignored. It returns the tokens once each, in file order, with their ids.
func (t *Tokenizer) resolveAdded(tokens []addedToken) ([]addedToken, error) {
	t.added = make(map[string]int, len(tokens))
	var list []addedToken
	index := make(map[string]int, len(tokens))
	maxID := -1
	for _, a := range tokens {
		if a.Content == "" {
			continue
		}
		id, ok := t.added[a.Content]
		if !ok {
			id, ok = t.vocab[a.Content]
		}
		if !ok {
			id = len(t.vocab)
			if maxID >= len(t.vocab) {
				id = maxID + 1
			}
		}
		if id >= maxTokenID {
			return nil, fmt.Errorf("token %q: too many tokens", a.Content)
		}
		a.File, a.ID = a.ID, id
		maxID = max(maxID, id)
		t.added[a.Content] = id
		if i, ok := index[a.Content]; ok {
			list[i] = a
		} else {
			index[a.Content] = len(list)
			list = append(list, a)
		}
		if id >= len(t.spell) {
			t.spell = append(t.spell, make([]string, id+1-len(t.spell))...)
		}
		t.respelled = t.respelled || t.spell[id] != "" && t.spell[id] != a.Content
		t.spell[id] = a.Content
	}
	return list, nil
}

// indexAdded makes the matchers of the added tokens, those matched after
// normalization by their normalized content; the normalizers must be
// parsed.
func (t *Tokenizer) indexAdded(list []addedToken) error {
	var raw, norm []addedToken
	var rawPatterns, normPatterns []string
	left := maxAddedBytes
	for _, a := range list {
		if a.Normalized {
			p, err := t.normalize(a.Content, left)
			if err != nil {
				return fmt.Errorf("token %q: %w (all normalized added tokens together may hold %d bytes)", a.Content, err, maxAddedBytes)
			}
			left -= len(p)
			norm = append(norm, a)
			normPatterns = append(normPatterns, p)
			t.piece = max(t.piece, len(p))
		} else {
			raw = append(raw, a)
			rawPatterns = append(rawPatterns, a.Content)
		}
	}
	t.rawAdded = newAddedSet(raw, rawPatterns)
	t.normAdded = newAddedSet(norm, normPatterns)
	return nil
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	var stages []componentJSON
	var flatten func(raw json.RawMessage) error
	flatten = func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		c, err := component(raw)
		if err != nil {
			return err
		}
		if c.Type != "Sequence" {
			stages = append(stages, c)
			return nil
		}
		for _, p := range c.Pretokenizers {
			if err := flatten(p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := flatten(raw); err != nil {
		return err
	}
	if len(stages) == 0 || stages[len(stages)-1].Type != "ByteLevel" {
		return errors.New("must end with ByteLevel: only byte-level BPE is supported")
	}
	for i, c := range stages {
		switch c.Type {
		case "Split":
			if c.Pattern == nil {
				return fmt.Errorf("Split %d has no pattern", i)
			}
			b, ok := behaviors[c.Behavior]
			if !ok {
				return fmt.Errorf("Split %d: unknown behavior %q", i, c.Behavior)
			}
			m, err := c.Pattern.compile()
			if err != nil {
				return fmt.Errorf("Split %d: %w", i, err)
			}
			t.splits = append(t.splits, split{pattern: m, behavior: b, invert: c.Invert})
		case "ByteLevel":
			if i != len(stages)-1 {
				return errors.New("ByteLevel must be the last pre-tokenizer")
			}
			// tokenizers' ByteLevel defaults both to true.
			t.prefixSpace = c.AddPrefixSpace == nil || *c.AddPrefixSpace
			t.gpt2Split = c.UseRegex == nil || *c.UseRegex
		default:
			return fmt.Errorf("type %q is not supported", c.Type)
		}
	}
	return nil
}

// parsePostProcessor takes the special tokens a TemplateProcessing adds
// around a single sequence ($A); ByteLevel only adjusts offsets.
func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	c, err := component(raw)
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.parsePostProcessor(p); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		t.prefix, t.suffix = nil, nil
		seen := false
		for _, piece := range c.Single {
			if seq, ok := piece["Sequence"]; ok {
				if seen || seq.ID != "A" {
					return errors.New("single template must hold the sequence $A once")
				}
				seen = true
				continue
			}
			sp, ok := piece["SpecialToken"]
			if !ok {
				return errors.New("single template piece is neither Sequence nor SpecialToken")
			}
			st, ok := c.SpecialTokens[sp.ID]
			if !ok {
				return fmt.Errorf("special token %q is not in special_tokens", sp.ID)
			}
			if seen {
				t.suffix = append(t.suffix, st.IDs...)
			} else {
				t.prefix = append(t.prefix, st.IDs...)
			}
		}
		if !seen {
			return errors.New("single template lacks the sequence $A")
		}
		return nil
	}
	return fmt.Errorf("type %q is not supported", c.Type)
}

func parseDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("missing: only the ByteLevel decoder is supported")
	}
	c, err := component(raw)
	if err != nil {
		return err
	}
	if c.Type == "Sequence" && len(c.Decoders) == 1 {
		return parseDecoder(c.Decoders[0])
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("type %q is not supported: only ByteLevel", c.Type)
	}
	return nil
}

// Encode returns the token ids of text, at most maxTokens of them. With
// addSpecial it adds the special tokens the tokenizer is configured to put
// around a sequence (BOS, for DeepSeek; see LoadConfig). Added tokens
// written in the text, such as <｜User｜>, are recognised either way.
// Invalid UTF-8 in text is first replaced by U+FFFD (see Decode), as a
// Python caller's bytes.decode(errors="replace") would.
//
// The work is bounded by maxTokens, not by what the normalizers make of
// the text: a text, as given or as normalized, longer than maxTokens
// tokens could cover (or than MaxTextBytes) is refused before it is
// built, and encoding stops at the first token past maxTokens. Either
// error wraps ErrTooLong.
func (t *Tokenizer) Encode(text string, addSpecial bool, maxTokens int) ([]int, error) {
	e := encoder{t: t, bufs: make([]splitBufs, len(t.splits)+1), max: maxTokens}
	e.limit = MaxTextBytes
	if maxTokens < MaxTextBytes/max(t.piece, 1) {
		e.limit = maxTokens * max(t.piece, 1)
	}
	if len(t.normalizers) == 0 && len(text) > e.limit {
		return nil, fmt.Errorf("%w: %d bytes, more than %d tokens of this vocabulary can hold", ErrTooLong, len(text), maxTokens)
	}
	e.ids = make([]int, 0, min(len(text)/4, maxTokens)+len(t.prefix)+len(t.suffix)) // about 4 bytes a token
	e.word = func(w string) {
		if e.err == nil {
			e.ids = t.model.encode(&e.bpe, e.ids, w)
			e.count()
		}
	}
	if addSpecial {
		e.add(t.prefix...)
	}
	e.raw(lossyUTF8(text))
	if addSpecial {
		e.add(t.suffix...)
	}
	if e.err != nil {
		return nil, e.err
	}
	return e.ids, nil
}

// encoder is the state of one Encode call.
type encoder struct {
	t     *Tokenizer
	ids   []int
	bufs  []splitBufs  // per pre-tokenizer stage
	word  func(string) // receives each pre-token
	bpe   bpeScratch
	max   int   // tokens
	limit int   // bytes of normalized text
	err   error // the first bound crossed; later work is skipped
}

type splitBufs struct {
	segs   []segment
	ranges [][2]int
}

// add appends ids that need no encoding.
func (e *encoder) add(ids ...int) {
	if e.err == nil {
		e.ids = append(e.ids, ids...)
		e.count()
	}
}

// count fails the encoding once it holds more than e.max tokens.
func (e *encoder) count() {
	if len(e.ids) > e.max && e.err == nil {
		e.err = fmt.Errorf("%w: more than %d tokens", ErrTooLong, e.max)
	}
}

// normalize is Tokenizer.normalize bounded by the encoding's limit.
func (e *encoder) normalize(s string) (string, bool) {
	if e.err != nil {
		return "", false
	}
	n, err := e.t.normalize(s, e.limit)
	if err != nil {
		e.err = fmt.Errorf("normalizer: %w, more than %d tokens can hold", err, e.max)
		return "", false
	}
	return n, true
}

// raw encodes text: added tokens that match before normalization first.
func (e *encoder) raw(s string) {
	if e.t.rawAdded == nil {
		if n, ok := e.normalize(s); ok {
			e.normalized(n)
		}
		return
	}
	for _, sg := range e.t.rawAdded.split(nil, s) {
		if sg.id >= 0 {
			e.add(sg.id)
		} else if n, ok := e.normalize(s[sg.start:sg.end]); ok {
			e.normalized(n)
		}
	}
}

// normalized encodes normalized text: added tokens that match after
// normalization first, then the pre-tokenizers.
func (e *encoder) normalized(s string) {
	if e.t.normAdded == nil {
		e.pretokenize(s, 0)
		return
	}
	for _, sg := range e.t.normAdded.split(nil, s) {
		if sg.id >= 0 {
			e.add(sg.id)
		} else {
			e.pretokenize(s[sg.start:sg.end], 0)
		}
	}
}

// pretokenize runs pre-tokenizer stage k and the later ones on s, depth
// first, and hands the resulting pre-tokens to e.word. The Splits come
// first; the last stage is ByteLevel: an optional leading space, then an
// optional split by the GPT-2 pattern.
func (e *encoder) pretokenize(s string, k int) {
	if s == "" || e.err != nil {
		return
	}
	t := e.t
	var sp *split
	if k < len(t.splits) {
		sp = &t.splits[k]
	} else {
		if t.prefixSpace && s[0] != ' ' {
			s = " " + s
		}
		if !t.gpt2Split {
			e.word(s)
			return
		}
		sp = &gpt2Split
	}
	b := &e.bufs[k]
	b.segs, b.ranges = sp.segments(b.segs, b.ranges, s)
	for _, sg := range b.segs {
		if k < len(t.splits) {
			e.pretokenize(s[sg.start:sg.end], k+1)
		} else if sg.start < sg.end {
			e.word(s[sg.start:sg.end])
		}
	}
}

// gpt2Split is the split the ByteLevel pre-tokenizer makes with use_regex.
var gpt2Split = split{pattern: knownPatterns[patternGPT2], behavior: isolated}

// Decode returns the text of ids as tokenizers' ByteLevel decoder does:
// the bytes of all tokens joined, with each ill-formed UTF-8 sequence (a
// multi-byte character cut between tokens, say) replaced by U+FFFD. Ids
// outside the vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int) string {
	return lossyUTF8(string(t.DecodeBytes(ids)))
}

// DecodeBytes returns the bytes ids stand for, without UTF-8 repair. For a
// tokenizer like DeepSeek's (no normalizer, every byte in the vocabulary,
// no lstrip or rstrip on added tokens), DecodeBytes(Encode(s, false)) is s
// for any valid UTF-8 s.
func (t *Tokenizer) DecodeBytes(ids []int) []byte {
	var out []byte
	for _, id := range ids {
		if id >= 0 && id < len(t.decoded) {
			out = append(out, t.decoded[id]...)
		}
	}
	return out
}

// Piece returns the text of one token for display: Decode of that id
// alone, so a token holding part of a multi-byte character shows U+FFFD.
func (t *Tokenizer) Piece(id int) string {
	return t.Decode([]int{id})
}

// Token returns the spelling of a token as tokenizer.json writes it (GPT-2
// byte alphabet, "Ġ" for a space), as tokenizers' id_to_token does, or ""
// for an unknown id.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.spell) {
		return ""
	}
	return t.spell[id]
}

// TokenID returns the id of a token spelling: an added token's content or
// a vocabulary entry, in that order.
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.added[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return id, ok
}

// VocabSize returns one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.spell) }

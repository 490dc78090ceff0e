package tokenizer

import (
	"encoding/json"
	"fmt"
)

// Vocab is the vocabulary of a tokenizer.json as Hugging Face tokenizers
// loads it, and so as transformers, vLLM and llama.cpp's converter (which
// reads it through transformers) see it. One rule resolves every id, the
// one Parse follows too:
//   - two spellings of one model id are refused (tokenizers would keep one
//     by hash order, so no two readers need agree);
//   - an added token whose content is a model token is that token, at the
//     model's id, whatever id the file gives it;
//   - any other added token takes the next id after the model's
//     vocabulary or after the largest added id, in file order (tokenizers
//     warns where the file says otherwise; Notes lists each such token);
//   - an added content given twice keeps its first id and its later flags.
//
// The same file always gives the same Vocab. ParseVocab reads nothing of
// the normalizers or pre-tokenizers, so a file whose text pipeline this
// package cannot run still gives its vocabulary.
type Vocab struct {
	// Tokens spells ids 0 to the largest: a token's spelling, or "" where
	// no token has the id (Has tells an empty spelling from none).
	Tokens []string
	// Added are the added tokens in file order, once each, with the ids
	// they resolve to.
	Added []AddedToken
	// Merges are the merge rules in rank order.
	Merges [][2]string

	has   []bool
	model map[string]int
	added map[string]int
}

// AddedToken is an entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID      int // as tokenizers resolves it (see Vocab)
	FileID  int // as the file gives it
	Content string
	Special bool
}

// ParseVocab reads the model vocabulary, merges and added tokens of a
// tokenizer.json file's contents. It accepts what Parse's model accepts
// (byte-level BPE) and refuses what Parse refuses there.
func ParseVocab(data []byte) (*Vocab, error) {
	var f struct {
		AddedTokens []addedToken `json:"added_tokens"`
		Model       modelJSON    `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	var t Tokenizer
	pairs, err := t.parseModel(&f.Model)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	list, err := t.resolveAdded(f.AddedTokens)
	if err != nil {
		return nil, fmt.Errorf("added_tokens: %w", err)
	}
	return newVocab(&t, pairs, list), nil
}

// Vocab returns the vocabulary of the file t was parsed from, the Vocab
// ParseVocab returns for it, without reading the file again, and true.
// The merges come from t's merge table, spelled by t's tokens, so that t
// keeps no copy of them; where that cannot give the file's list (a merge
// the file repeats, an added token at the id of a model token spelled
// otherwise) Vocab returns false, and the file must be read with
// ParseVocab. The Vocab shares t's tables: its holder reads it and
// changes nothing in it.
func (t *Tokenizer) Vocab() (*Vocab, bool) {
	if t.respelled || len(t.model.merges) != t.nMerges {
		return nil, false
	}
	// With no repeat, the table holds every rank from 0 once.
	pairs := make([][2]string, t.nMerges)
	for k, m := range t.model.merges {
		pairs[m.rank] = [2]string{t.spell[k>>32], t.spell[uint32(k)]}
	}
	return newVocab(t, pairs, t.addedList), true
}

// newVocab is the Vocab of t once its model and added tokens are read:
// pairs are the model's merges in rank order, list the added tokens as
// resolveAdded returned them.
func newVocab(t *Tokenizer, pairs [][2]string, list []addedToken) *Vocab {
	if len(pairs) == 0 {
		pairs = nil // however the file spelled no merges
	}
	v := &Vocab{Tokens: t.spell, Merges: pairs, has: make([]bool, len(t.spell)), model: t.vocab, added: t.added}
	for _, id := range t.vocab {
		v.has[id] = true
	}
	for _, a := range list {
		v.has[a.ID] = true
		v.Added = append(v.Added, AddedToken{ID: a.ID, FileID: a.File, Content: a.Content, Special: a.Special})
	}
	return v
}

// Has reports whether some token has the id.
func (v *Vocab) Has(id int) bool { return id >= 0 && id < len(v.has) && v.has[id] }

// ID returns the id of a token spelling: an added token's content or a
// model token, in that order (tokenizers' token_to_id).
func (v *Vocab) ID(token string) (int, bool) {
	if id, ok := v.added[token]; ok {
		return id, true
	}
	id, ok := v.model[token]
	return id, ok
}

// Notes says, one line per token in file order, where the vocabulary's
// ids differ from what the file's added_tokens say.
func (v *Vocab) Notes() []string {
	var out []string
	for _, a := range v.Added {
		if a.ID == a.FileID {
			continue
		}
		why := "the next free id"
		if _, ok := v.model[a.Content]; ok {
			why = "the model's own token"
		}
		out = append(out, fmt.Sprintf("added token %q: id %d in the file, %d as tokenizers loads it (%s)", a.Content, a.FileID, a.ID, why))
	}
	return out
}

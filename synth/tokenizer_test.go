package synth

import (
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	_ "github.com/dsfs/dsfs/trace/deepseek4"
	_ "github.com/dsfs/dsfs/trace/deepseek41"
	v4 "github.com/dsfs/dsfs/trace/v4"
)

// TestPresetsRunTrace checks what trace/ needs of every preset: a
// tokenizer.json of config.json's vocab_size, BOS at id 0, that encodes
// trace/'s default prompts and decodes them back; and, for the V4 and
// V4.1 layouts, that the family opens every layer from the headers, which
// for V4.1 means Engram's hashing agrees with the tokenizer (its token
// map has engram_compressed_vocab_size keys, each table's rows are the
// sum of its primes). The specs are written sparse: only headers and
// configs matter here.
func TestPresetsRunTrace(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			dir := t.TempDir()
			vocab := 0
			if p.MLA != nil {
				vocab = p.MLA.Vocab
				if err := WriteTokenizer(dir, vocab); err != nil {
					t.Fatal(err)
				}
			} else {
				vocab = p.Spec.Vocab
				s := p.Spec
				s.Sparse = true
				if err := WriteSpec(s, dir); err != nil {
					t.Fatal(err)
				}
			}
			tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
			if err == nil {
				err = tok.LoadConfig(filepath.Join(dir, "tokenizer_config.json"))
			}
			if err != nil {
				t.Fatal(err)
			}
			if tok.VocabSize() != vocab {
				t.Errorf("tokenizer.json has %d ids, config.json's vocab_size is %d", tok.VocabSize(), vocab)
			}
			prompts := trace.DefaultPrompts()
			if err := trace.Encode(prompts, tok, vocab); err != nil {
				t.Fatal(err)
			}
			for _, q := range prompts {
				if q.TokenIDs[0] != 0 {
					t.Errorf("prompt %s starts with id %d, not BOS 0", q.ID, q.TokenIDs[0])
				}
				if got := tok.Decode(q.TokenIDs[1:]); got != *q.Text {
					t.Errorf("prompt %s decodes to %q, not %q", q.ID, got, *q.Text)
				}
			}
			if p.MLA != nil {
				return
			}
			cat, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			m, err := trace.Lookup(cat.Config.Family).Open(cat, tok)
			if err != nil {
				t.Fatal(err)
			}
			if ps := m.Problems(); len(ps) > 0 {
				t.Errorf("trace/ cannot run every layer: %q", ps)
			}
			if p.Spec.Arch == ArchV41 {
				if _, n := v4.CompressedTokenMap(tok); n != p.Spec.engramKeys() {
					t.Errorf("the Engram token map has %d keys, EngramKeys %d", n, p.Spec.engramKeys())
				}
			}
		})
	}
}

package checkpoint

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/tokenizer"
)

func TestCatalogTokenizer(t *testing.T) {
	synth, err := tokenizer.SynthesizeVocab(2000, 300, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// A normalizer Parse does not run: the vocabulary still reads.
	foreign := strings.Replace(string(synth), `"normalizer": null`, `"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}`, 1)
	if foreign == string(synth) {
		t.Fatal("the synthesized file has no null normalizer to replace")
	}
	for _, tc := range []struct {
		name        string
		files       map[string]string
		tokErr      string // "" for none
		noTokenizer bool
	}{
		{"none", nil, "", true},
		{"tokenizer and config", map[string]string{"tokenizer.json": string(synth), "tokenizer_config.json": string(tokenizer.SynthesizeConfig())}, "", false},
		{"bad config", map[string]string{"tokenizer.json": string(synth), "tokenizer_config.json": "{"}, "tokenizer_config.json: ", false},
		{"pipeline Parse refuses", map[string]string{"tokenizer.json": foreign}, "tokenizer.json: normalizer", false},
		{"no JSON", map[string]string{"tokenizer.json": "["}, "tokenizer.json: ", false},
	} {
		dir := t.TempDir()
		goodCheckpoint(t, dir)
		for name, content := range tc.files {
			writeFile(t, dir, name, content)
		}
		c := mustOpen(t, dir)
		tok, err := c.Tokenizer()
		switch {
		case tc.tokErr != "":
			if err == nil || !strings.HasPrefix(err.Error(), tc.tokErr) || tok != nil {
				t.Errorf("%s: Tokenizer() = %v, %v; want an error starting %q", tc.name, tok, err, tc.tokErr)
			}
		case err != nil || (tok == nil) != tc.noTokenizer:
			t.Errorf("%s: Tokenizer() = %v, %v", tc.name, tok, err)
		}
		v, err := c.Vocab()
		want, wantErr := tokenizer.ParseVocab([]byte(tc.files["tokenizer.json"]))
		switch {
		case tc.noTokenizer:
			if v != nil || err != nil {
				t.Errorf("%s: Vocab() = %v, %v; want none", tc.name, v, err)
			}
		case wantErr != nil:
			if err == nil || !strings.Contains(err.Error(), wantErr.Error()) {
				t.Errorf("%s: Vocab() error %v, want %v", tc.name, err, wantErr)
			}
		case err != nil || !reflect.DeepEqual(v, want):
			t.Errorf("%s: Vocab() differs from ParseVocab's (%v)", tc.name, err)
		}
	}
}

// TestCatalogTokenizerOnce: views asking while one of them keeps the
// Tokenizer share one parse, the vocabulary's asker too; once none keeps
// it, it is collected and the next asker parses the file again.
func TestCatalogTokenizerOnce(t *testing.T) {
	synth, err := tokenizer.SynthesizeVocab(2000, 300, 1000)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goodCheckpoint(t, dir)
	writeFile(t, dir, "tokenizer.json", string(synth))
	c := mustOpen(t, dir)
	kept, err := c.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Tokenizer(); again != kept {
		t.Error("a second view parsed the file again while the first kept it")
	}
	// A Vocab shares its Tokenizer's spellings.
	own, ok := kept.Vocab()
	if v, err := c.Vocab(); err != nil || !ok || &v.Tokens[0] != &own.Tokens[0] {
		t.Errorf("the vocabulary was read apart from the Tokenizer kept (%v, %v)", err, ok)
	}
	runtime.KeepAlive(kept)
	kept = nil
	runtime.GC()
	if c.tokenizers.tok.Value() != nil {
		t.Error("the memo keeps a Tokenizer no view keeps")
	}
	if v, err := c.Vocab(); err != nil || v == nil {
		t.Errorf("Vocab() after the Tokenizer was collected: %v, %v", v, err)
	}
}

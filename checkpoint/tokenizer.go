package checkpoint

import (
	"fmt"
	"sync"
	"weak"

	"github.com/dsfs/dsfs/tokenizer"
)

// tokenizerMemo is the checkpoint's tokenizer.json as parsed, shared by
// the views that read it at mount: trace/ keeps the Tokenizer for its
// prompts, gguf/ takes the vocabulary for its headers once (V2, V3, R1
// and V4-Flash checkpoints have both views; V4.1 has no gguf/ yet).
// Parsing a released file costs ~120 ms and ~45 MB of allocations, so it
// is done once while any view keeps the result; a mount whose views keep
// nothing (gguf/ alone) holds none of it after its build.
type tokenizerMemo struct {
	mu        sync.Mutex
	tok       weak.Pointer[tokenizer.Tokenizer]
	configErr error // why tokenizer_config.json could not be applied to tok
	parseErr  error // why tokenizer.json does not parse whole
}

// Tokenizer returns the checkpoint's tokenizer: tokenizer.json parsed
// (tokenizer.Parse), with the special-token settings of
// tokenizer_config.json when the checkpoint has one. It returns nil and no
// error when the checkpoint has no tokenizer.json. Callers share the
// Tokenizer and must not configure it further.
func (c *Catalog) Tokenizer() (*tokenizer.Tokenizer, error) {
	tok, configErr, err := c.parsedTokenizer()
	if err == nil {
		err = configErr
	}
	if err != nil {
		return nil, err
	}
	return tok, nil
}

// Vocab returns the vocabulary of the checkpoint's tokenizer.json
// (tokenizer.ParseVocab), taken from the shared Tokenizer when the file
// parses whole, and read from the file alone when tokenizer.Parse refuses
// a part of it that the vocabulary does not need (a normalizer, a
// pre-tokenizer) or the Tokenizer cannot give it (Tokenizer.Vocab). It
// returns nil and no error when the checkpoint has no tokenizer.json.
func (c *Catalog) Vocab() (*tokenizer.Vocab, error) {
	tok, _, err := c.parsedTokenizer()
	if tok != nil {
		if v, ok := tok.Vocab(); ok {
			return v, nil
		}
	} else if err == nil {
		return nil, nil
	}
	data, err := c.ReadFile("tokenizer.json", tokenizer.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	v, err := tokenizer.ParseVocab(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	return v, nil
}

// parsedTokenizer returns tokenizer.json parsed, with tokenizer_config.json
// applied unless configErr says why it could not be, parsing it unless a
// view still keeps it from before. It returns the error of tokenizer.json
// when that does not parse, and nothing when the checkpoint has no
// tokenizer.json. A catalog not made by Open or OpenStore has no memo and
// parses the file on every call.
func (c *Catalog) parsedTokenizer() (tok *tokenizer.Tokenizer, configErr, err error) {
	m := c.tokenizers
	if m == nil {
		m = new(tokenizerMemo)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if tok := m.tok.Value(); tok != nil {
		return tok, m.configErr, nil
	}
	if m.parseErr != nil {
		return nil, nil, m.parseErr
	}
	if !c.HasFile("tokenizer.json") {
		return nil, nil, nil
	}
	data, err := c.ReadFile("tokenizer.json", tokenizer.MaxFileSize)
	if err != nil {
		// Not kept: the next view tries the file again.
		return nil, nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tok, err = tokenizer.Parse(data); err != nil {
		m.parseErr = fmt.Errorf("tokenizer.json: %w", err)
		return nil, nil, m.parseErr
	}
	m.configErr = nil
	if c.HasFile("tokenizer_config.json") {
		data, err := c.ReadFile("tokenizer_config.json", tokenizer.MaxFileSize)
		if err == nil {
			err = tok.ParseConfig(data)
		}
		if err != nil {
			m.configErr = fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	m.tok = weak.Make(tok)
	return tok, m.configErr, nil
}

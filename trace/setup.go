package trace

import (
	"fmt"
	"slices"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
)

// LoadTokenizer loads the checkpoint's tokenizer.json with the special
// token settings of its tokenizer_config.json. It returns nil and no error
// when the checkpoint has no tokenizer.json.
func LoadTokenizer(cat *checkpoint.Catalog) (*tokenizer.Tokenizer, error) {
	has := func(name string) bool {
		return slices.ContainsFunc(cat.Files, func(f checkpoint.File) bool { return f.Name == name })
	}
	if !has("tokenizer.json") {
		return nil, nil
	}
	data, err := cat.ReadFile("tokenizer.json", tokenizer.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	tok, err := tokenizer.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if has("tokenizer_config.json") {
		data, err := cat.ReadFile("tokenizer_config.json", tokenizer.MaxFileSize)
		if err == nil {
			err = tok.ParseConfig(data)
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	return tok, nil
}

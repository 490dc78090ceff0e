package trace

import (
	"fmt"
	"path"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
)

// LoadTokenizer loads the checkpoint's tokenizer.json with the special
// token settings of its tokenizer_config.json. It returns nil and no error
// when the checkpoint has no tokenizer.json.
func LoadTokenizer(cat *checkpoint.Catalog) (*tokenizer.Tokenizer, error) {
	var tokPath, cfgPath string
	for _, f := range cat.Files {
		switch f.Name {
		case "tokenizer.json":
			tokPath = f.Path
		case "tokenizer_config.json":
			cfgPath = f.Path
		}
	}
	if tokPath == "" {
		return nil, nil
	}
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		return nil, err
	}
	if cfgPath != "" {
		if err := tok.LoadConfig(cfgPath); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(cfgPath), err)
		}
	}
	return tok, nil
}

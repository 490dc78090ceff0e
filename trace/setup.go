package trace

import (
	"fmt"
	"log/slog"
	"path"

	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/manifest"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/model"
)

// NewBackend returns the backend a --device value names: "cpu"; "cuda",
// the first GPU or the reason CUDA cannot be used; "auto" (or empty), CUDA
// when it starts, else the CPU. note says, in one line, why auto fell back
// to the CPU, for the caller to log.
func NewBackend(device string) (b model.Backend, note string, err error) {
	switch device {
	case "cpu":
		return model.NewCPU(), "", nil
	case "cuda":
		b, err := cuda.NewBackend(cuda.Options{Log: slog.Default()})
		if err != nil {
			return nil, "", fmt.Errorf("cuda: %w", err)
		}
		return b, "", nil
	case "", "auto":
		b, err := cuda.NewBackend(cuda.Options{Log: slog.Default()})
		if err != nil {
			return model.NewCPU(), "trace/ runs layers on the CPU: " + err.Error(), nil
		}
		return b, "", nil
	}
	return nil, "", CheckDevice(device)
}

// NewV4Backend returns what DeepSeek-V4 and V4.1 layers run on for --device
// device: nil (the host V4 engine) for cpu, the CUDA backend for cuda and
// auto when it starts. When it cannot, the layers run on the host and
// note says why in one line; only an unknown device is an error.
func NewV4Backend(device string) (b model.Backend, note string, err error) {
	switch device {
	case "cpu":
		return nil, "", nil
	case "cuda", "", "auto":
		cb, err := cuda.NewBackend(cuda.Options{Log: slog.Default()})
		if err != nil {
			return nil, "trace: DeepSeek-V4 layers run on the CPU: cuda: " + err.Error(), nil
		}
		return cb, "", nil
	}
	return nil, "", CheckDevice(device)
}

// CheckDevice reports whether device is a --device value NewBackend knows,
// without starting anything.
func CheckDevice(device string) error {
	switch device {
	case "", "auto", "cpu", "cuda":
		return nil
	}
	return fmt.Errorf("unknown device %q (want auto, cpu or cuda)", device)
}

// LoadTokenizer loads the checkpoint's tokenizer.json with the special
// token settings of its tokenizer_config.json. It returns nil and no error
// when the checkpoint has no tokenizer.json.
func LoadTokenizer(cat *manifest.Catalog) (*tokenizer.Tokenizer, error) {
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

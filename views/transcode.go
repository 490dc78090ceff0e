package views

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/engramfp4"
	dsfsbuild "github.com/dsfs/dsfs/internal/build"
	"github.com/dsfs/dsfs/nvfp4"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
)

// The transcoding views' rewriters, the engines' transcoders: nvfp4/ and
// engram-fp4/ apply one each, nvfp4+engram-fp4/ both.
var (
	nvfp4Rewrites  = rewrites{"nvfp4", newNVFP4}
	engramRewrites = rewrites{"engram-fp4", func(s *Set) (Rewriter, error) { return engramfp4.New(s.Cat), nil }}
)

// nvfp4Options are nvfp4/'s options; nvfp4+engram-fp4/ takes them too.
var nvfp4Options = []Option{
	{Name: "nvfp4-mtp", Usage: "nvfp4/: convert the MTP blocks' experts to NVFP4 too (by default they stay MXFP4, as in NVIDIA's build and as draft models read them)", Kind: BoolOption, Default: "false"},
	{Name: "nvfp4-calibrate", Usage: "nvfp4/: a prompts file (--trace-prompts' format) whose forward sets each expert's input_scale to amax/(6*448) of what enters it (default: 1.0)", File: true},
}

// newNVFP4 makes the mount's NVFP4 transcoder from nvfp4/'s options. A
// calibration that cannot be set up is a problem of the transcoding views
// alone: they show ERROR.txt, the mount the rest.
func newNVFP4(s *Set) (Rewriter, error) {
	mtp, err := s.boolOption("nvfp4", "nvfp4-mtp")
	if err != nil {
		return nil, err
	}
	opt := nvfp4.Options{MTP: mtp, Disk: s.Opt.DiskCache, Producer: nvfp4.Producer{Name: "dsfs", Version: dsfsbuild.Version(), Codec: codecs.Version}}
	if file := s.option("nvfp4", "nvfp4-calibrate"); file != "" {
		if opt.Calibration, err = s.nvfp4Calibration(file); err != nil {
			return nil, &viewProblem{summary: "cannot calibrate with --nvfp4-calibrate " + file, err: err}
		}
	}
	return nvfp4.New(s.Cat, opt), nil
}

// viewProblem is why a view serves only ERROR.txt: the mount serves the
// others.
type viewProblem struct {
	summary string
	err     error
}

func (p *viewProblem) Error() string { return p.summary + ": " + p.err.Error() }

// nvfp4Calibration sets up the calibration of --nvfp4-calibrate: the
// prompts (checked and encoded now, so that a bad file is one line at
// mount) traced through the checkpoint's model by its trace family, on
// trace/'s --device and at its --trace-precision, within
// --trace-memory-mb. The layers run when the first input_scale is read.
func (s *Set) nvfp4Calibration(file string) (*nvfp4.Calibration, error) {
	prompts, err := trace.LoadPrompts(file)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(file) // LoadPrompts read it whole, under its bound
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	family := trace.Lookup(s.Cat.Config.Family)
	if family == nil {
		return nil, fmt.Errorf("no trace engine runs %q models", s.Cat.Config.Family)
	}
	tok, tokErr := s.Cat.Tokenizer()
	m, err := family.Open(s.Cat, tok)
	if err != nil {
		return nil, err
	}
	if err := trace.Encode(prompts, tok, m.Vocab()); err != nil {
		if tokErr != nil && errors.Is(err, trace.ErrNoTokenizer) {
			err = fmt.Errorf("the prompts are text, and tokenizer.json cannot be read: %w", tokErr)
		}
		return nil, err
	}
	if p := m.Problems(); len(p) > 0 {
		slog.Warn("nvfp4/: the calibration runs the layers the trace engine can; the others take the largest input scales found", "problems", len(p), "first", p[0])
	}
	precision := s.option("trace", "trace-precision")
	b, note, err := backend.Start(s.option("trace", "device"), s.Opt.GPU)
	if err != nil {
		return nil, fmt.Errorf("--device: %w", err)
	}
	// Makers run one at a time under the rewriters' memo, before the set
	// keeps what the builders made: the set's own lists are safe here.
	if note != "" {
		s.warnings = append(s.warnings, "nvfp4/ calibration: "+note)
	}
	if c, ok := b.(io.Closer); ok {
		s.closers = append(s.closers, c)
	}
	tr, err := m.Trace(prompts, trace.Options{Backend: b, Precision: precision, Log: slog.Default(), Started: s.traceStarted})
	if err != nil {
		return nil, err
	}
	if err := s.traceBudget(tr.Cost(), prompts); err != nil {
		return nil, err
	}
	calibrator, ok := tr.(trace.Calibrator)
	if !ok {
		return nil, errors.New("the trace engine records nothing of the experts")
	}
	tokens := 0
	for _, p := range prompts {
		tokens += len(p.TokenIDs)
	}
	return &nvfp4.Calibration{
		SHA256: hex.EncodeToString(sum[:]), Tokens: tokens, Precision: precision,
		Amax: func(ctx context.Context) ([]nvfp4.Amax, error) {
			layers, err := calibrator.Calibrate(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]nvfp4.Amax, len(layers))
			for i, l := range layers {
				out[i] = nvfp4.Amax{Layer: l.Layer, In: l.In, Mid: l.Mid}
			}
			return out, nil
		},
	}, nil
}

// nvfp4Transcoder returns the mount's NVFP4 transcoder, the one nvfp4/ and
// nvfp4+engram-fp4/ rewrite with, whose memo of each expert group's global
// exponent manifest/'s descriptions share.
func (s *Set) nvfp4Transcoder() (*nvfp4.Transcoder, error) {
	rw, err := s.rewritten.get(s, nvfp4Rewrites)
	if err != nil {
		return nil, err
	}
	return rw.rw.(*nvfp4.Transcoder), nil
}

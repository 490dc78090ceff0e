package views

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
	v4 "github.com/dsfs/dsfs/trace/v4"
	"github.com/dsfs/dsfs/vfile"
)

// buildTraceV4 is trace/ for a DeepSeek-V4 checkpoint: the same files as
// for V2/V3 (the layers' records and activations with V4's tensors), plus
// logits.safetensors. Layers run at the precision --trace-precision names
// (a8, the default, or fp32), on the backend --device chooses.
func buildTraceV4(s *Set, prompts []trace.Prompt, user bool) (Built, error) {
	prec, err := tracePrecision(s.option("trace", "trace-precision"))
	if err != nil {
		return Built{}, err
	}
	files, failed := readCatalogFiles(s, "inference/config.json")
	if failed != nil {
		return *failed, nil
	}
	m, err := v4.Open(s.Cat, files["inference/config.json"])
	if err != nil {
		return traceError("cannot read the model", err.Error()), nil
	}
	return s.serveV4Trace(m, m.Config.Vocab, m.Config.Layers, loadTraceTokenizer(s), prompts, user, prec, func(prompts []trace.Prompt, tok *tokenizer.Tokenizer) v4Tracer {
		return trace.NewV4(m, prec, prompts, tok, slog.Default())
	})
}

// buildTraceV41 is trace/ for a DeepSeek-V4.1 checkpoint: V4's files,
// with the layers' carried pre_mix, candidate masks and Engram hash ids
// and gates. DSpark stages (mtp.*) are listed in trace.json, not run.
func buildTraceV41(s *Set, prompts []trace.Prompt, user bool) (Built, error) {
	prec, err := tracePrecision(s.option("trace", "trace-precision"))
	if err != nil {
		return Built{}, err
	}
	files, failed := readCatalogFiles(s, "inference/config.json")
	if failed != nil {
		return *failed, nil
	}
	// One tokenizer for the prompts and the Engram token map.
	tok := loadTraceTokenizer(s)
	m, err := v4.Open41(s.Cat, files["inference/config.json"], tok.tok)
	if err != nil {
		return traceError("cannot read the model", err.Error()), nil
	}
	return s.serveV4Trace(m, m.Config.Vocab, m.Config.Layers, tok, prompts, user, prec, func(prompts []trace.Prompt, tok *tokenizer.Tokenizer) v4Tracer {
		return trace.NewV41(m, prec, prompts, tok, slog.Default())
	})
}

// serveV4Trace is trace/ of an opened V4-family model m of vocab ids and
// layers layers: it encodes the prompts with tok, starts the backend
// --device chooses and lays out the files of the tracer newTracer makes.
func (s *Set) serveV4Trace(m v4Model, vocab, layers int, tok traceTokenizer, prompts []trace.Prompt, user bool, prec v4.Precision, newTracer func([]trace.Prompt, *tokenizer.Tokenizer) v4Tracer) (Built, error) {
	var out Built
	problems, failed, err := tok.encode(s, &prompts, user, vocab)
	if failed != nil || err != nil {
		return *failed, err
	}
	backend, err := v4Backend(s, &out)
	if err != nil {
		return out, err
	}
	m.SetBackend(backend)
	tr := newTracer(prompts, tok.tok)
	if failed, err := s.withinBudget(&out, tr.Cost(), prompts, user); failed != nil || err != nil {
		return *failed, err
	}
	out.Stats = func() any {
		return map[string]any{"layer_forwards": tr.Forwards(), "backend": tr.BackendName(), "precision": string(prec)}
	}
	return s.v4Tree(out, tr, m, layers, problems)
}

// readCatalogFiles reads the named files of the checkpoint that exist;
// failed is trace/'s ERROR.txt when one cannot be read.
func readCatalogFiles(s *Set, names ...string) (map[string][]byte, *Built) {
	files := make(map[string][]byte)
	for _, f := range s.Cat.Files {
		for _, name := range names {
			if f.Name != name {
				continue
			}
			b, err := os.ReadFile(f.Path)
			if err != nil {
				failed := traceError("cannot read "+name, fmt.Sprintf("%s: %v", name, err))
				return nil, &failed
			}
			files[name] = b
		}
	}
	return files, nil
}

// v4Backend starts what V4 and V4.1 layers run on for --device (nil: the host
// engine), through the backend starter the caller gave, noting in out why
// it fell back to the host and closing it with the view.
func v4Backend(s *Set, out *Built) (backend.Backend, error) {
	if s.Opt.V4Backend == nil {
		return nil, nil
	}
	backend, note, err := s.Opt.V4Backend(s.option("trace", "device"))
	if err != nil {
		return nil, fmt.Errorf("--device: %w", err)
	}
	if note != "" {
		out.Warnings = append(out.Warnings, note)
	}
	if c, ok := backend.(io.Closer); ok {
		out.Closers = append(out.Closers, c)
	}
	return backend, nil
}

// v4Model is what trace/ sets and reports of a V4-family model: the
// backend it runs on and what keeps it from running whole.
type v4Model interface {
	SetBackend(backend.Backend)
	Checked() int
	Problems(l int) []string
	HeadProblems() []string
}

// v4Tracer is a V4 or V4.1 tracer: what trace/'s files are read from.
type v4Tracer interface {
	Layers() int
	Forwards() int64
	BackendName() string
	PromptsJSON() ([]byte, error)
	TraceJSON(ctx context.Context) ([]byte, error)
	LayerJSON(ctx context.Context, l int) ([]byte, error)
	Activations(l int) []trace.V4Activation
	LogitActivations() []trace.V4Activation
	ReadActivation(ctx context.Context, l int, a trace.V4Activation, r0, r1 int, dst []byte) error
	Cost() trace.Cost
}

// v4Tree lays out trace/ of a V4-family model of layers layers: prompts,
// trace.json, each runnable layer's record and activations, the logits
// when every layer and the head can run, and ERROR.txt listing the
// problems.
func (s *Set) v4Tree(out Built, tr v4Tracer, m v4Model, layers int, problems []string) (Built, error) {
	for l := range m.Checked() {
		for _, p := range m.Problems(l) {
			problems = append(problems, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	for _, p := range m.HeadProblems() {
		problems = append(problems, "head: "+p)
	}
	if n := tr.Layers(); n < layers {
		problems = append(problems, fmt.Sprintf("layers %d-%d are not served: each needs the layers before it", n, layers-1))
	}
	pj, err := tr.PromptsJSON()
	if err != nil {
		return out, err
	}
	files := map[string]*vfile.Node{
		"prompts.json": {File: vfile.NewFile(vfile.Bytes(pj))},
		"trace.json":   {Doc: vfile.NewDoc(tr.TraceJSON)},
	}
	width := max(2, len(fmt.Sprint(layers-1)))
	for l := range tr.Layers() {
		name := fmt.Sprintf("layers/%0*d", width, l)
		files[name+".json"] = &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) { return tr.LayerJSON(ctx, l) })}
		f, err := s.traceV4File(tr, l, tr.Activations(l), "trace/"+name+".safetensors")
		if err != nil {
			return out, err
		}
		files[name+".safetensors"] = &vfile.Node{File: f}
	}
	if tr.Layers() == layers && len(m.HeadProblems()) == 0 {
		f, err := s.traceV4File(tr, -1, tr.LogitActivations(), "trace/logits.safetensors")
		if err != nil {
			return out, err
		}
		files["logits.safetensors"] = &vfile.Node{File: f}
	}
	if len(problems) > 0 {
		files["ERROR.txt"] = errorText(problems)
		out.Warnings = append(out.Warnings, traceWarning(fmt.Sprintf("serves part of the model (%d problems)", len(problems))))
	}
	out.Root = tree("", files)
	return out, nil
}

// tracePrecision reads --trace-precision.
func tracePrecision(p string) (v4.Precision, error) {
	switch p {
	case "", "a8":
		return v4.A8, nil
	case "fp32":
		return v4.FP32, nil
	}
	return "", fmt.Errorf("--trace-precision: %q is not a8 or fp32", p)
}

// traceV4File lays out activations as a safetensors file whose blocks
// run what they need (layer l, or every layer and the head for l = -1)
// when first read.
func (s *Set) traceV4File(tr v4Tracer, l int, acts []trace.V4Activation, id string) (*vfile.File, error) {
	var outs []tensorfile.Out
	for _, a := range acts {
		data := tensorfile.RowBlocks(id+"/"+a.Name, int64(a.Rows()), a.RowBytes(), func(ctx context.Context, lo, hi int64, dst []byte) error {
			return tr.ReadActivation(ctx, l, a, int(lo), int(hi), dst)
		})
		outs = append(outs, tensorfile.Out{Name: a.Name, DType: a.DType, Shape: a.Shape, Data: data, Codec: "trace"})
	}
	return s.tensorFile("trace", outs)
}

package views

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/vfile"
)

// traceOptions are trace/'s options.
var traceOptions = []Option{
	{Name: "trace-prompts", Usage: "JSON list of prompts for trace/, each {id, label, text} or {id, label, token_ids} (default: the seed's four prompts)", File: true},
	{Name: "device", Usage: "where trace/ runs decoder layers: auto (CUDA when a GPU and its libraries load, else the CPU), cpu or cuda", Default: "auto", Check: backend.CheckDevice},
	{Name: "trace-precision", Usage: "how trace/ runs DeepSeek-V4 layers: a8 (FP8 activations into FP8/FP4 linears, as DeepSeek's reference) or fp32", Default: "a8", Check: checkTracePrecision},
	{Name: "trace-memory-mb", Usage: "memory trace/ may hold outside the block cache, in MiB: prompts whose trace would need more are refused at mount", Default: strconv.Itoa(trace.DefaultMemoryMiB), Kind: IntOption, Check: checkTraceMemory},
}

// checkTracePrecision reads --trace-precision.
func checkTracePrecision(p string) error {
	switch p {
	case "", "a8", "fp32":
		return nil
	}
	return fmt.Errorf("--trace-precision: %q is not a8 or fp32", p)
}

// checkTraceMemory reads --trace-memory-mb.
func checkTraceMemory(v string) error {
	_, err := traceMemory(v)
	return err
}

func traceMemory(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > 1<<30 {
		return 0, fmt.Errorf("--trace-memory-mb %q: want a positive number of MiB", v)
	}
	return n << 20, nil
}

// buildTrace is the trace/ view: files whose reading runs decoder layers
// on the prompts (DESIGN.md, trace/), through the trace family registered
// for the checkpoint's family. A checkpoint it cannot run gets ERROR.txt
// saying why instead; a bad --trace-prompts file, --device or
// --trace-precision fails the mount, since the user asked for them.
func buildTrace(s *Set, _ string) (Built, error) {
	var out Built
	var prompts []trace.Prompt
	user := s.option("trace", "trace-prompts") != ""
	if user {
		var err error
		if prompts, err = trace.LoadPrompts(s.option("trace", "trace-prompts")); err != nil {
			return out, fmt.Errorf("--trace-prompts: %w", err)
		}
	}
	device, precision := s.option("trace", "device"), s.option("trace", "trace-precision")
	if err := backend.CheckDevice(device); err != nil {
		return out, fmt.Errorf("--device: %w", err)
	}
	if err := checkTracePrecision(precision); err != nil {
		return out, err
	}
	family := trace.Lookup(s.Cat.Config.Family)
	if family == nil {
		return traceError("cannot run this model", "no engine runs "+string(s.Cat.Config.Family)), nil
	}
	tok := loadTraceTokenizer(s)
	m, err := family.Open(s.Cat, tok.tok)
	if ue := (*trace.Unsupported)(nil); errors.As(err, &ue) {
		return traceError("cannot run "+ue.What, "cannot run "+ue.What+"; the engine lacks:", ue.Missing...), nil
	}
	if err != nil {
		return traceError("cannot read the model", err.Error()), nil
	}
	problems, failed, err := tok.encode(s, &prompts, user, m.Vocab())
	if failed != nil || err != nil {
		return *failed, err
	}
	// The backend starts only for a model it can run: CUDA compiles its
	// kernels and takes device memory.
	b, note, err := backend.Start(device, s.Opt.GPU)
	if err != nil {
		return out, fmt.Errorf("--device: %w", err)
	}
	if note != "" {
		out.Warnings = append(out.Warnings, note)
	}
	if c, ok := b.(io.Closer); ok {
		out.Closers = append(out.Closers, c)
	}
	tr, err := m.Trace(prompts, trace.Options{Backend: b, Precision: precision, Tokenizer: tok.tok, Log: slog.Default(), Started: s.traceStarted})
	if err != nil {
		return out, err
	}
	if failed, err := s.withinBudget(&out, tr.Cost(), prompts, user); failed != nil || err != nil {
		return *failed, err
	}
	out.Stats = func() any { return tr.Stats() }
	problems = append(problems, m.Problems()...)
	files, err := trace.Files(tr, m.Layers(), problems)
	if err != nil {
		return out, err
	}
	nodes := make(map[string]*vfile.Node, len(files))
	for _, f := range files {
		switch {
		case f.Doc != nil:
			nodes[f.Name] = &vfile.Node{Doc: vfile.NewDoc(f.Doc)}
		case f.Tensors != nil:
			vf, err := s.traceTensors("trace/"+f.Name, f)
			if err != nil {
				return out, err
			}
			nodes[f.Name] = &vfile.Node{File: vf}
		default:
			nodes[f.Name] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(f.Bytes))}
		}
	}
	n := len(problems)
	if tr.Layers() < m.Layers() {
		n++ // trace.Files lists the layers not served
	}
	if n > 0 {
		out.Warnings = append(out.Warnings, traceWarning(fmt.Sprintf("serves part of the model (%d problems)", n)))
	}
	out.Root = tree("", nodes)
	return out, nil
}

// withinBudget refuses prompts whose trace would hold more than
// --trace-memory-mb (trace.Cost), before anything runs: the user's with
// an error, the defaults with ERROR.txt. It closes what out started when
// it refuses.
func (s *Set) withinBudget(out *Built, c trace.Cost, prompts []trace.Prompt, user bool) (failed *Built, err error) {
	if err = s.traceBudget(c, prompts); err == nil {
		return nil, nil
	}
	for _, cl := range out.Closers {
		cl.Close()
	}
	out.Closers = nil
	if user {
		return &Built{}, fmt.Errorf("--trace-prompts %s: %w", s.option("trace", "trace-prompts"), err)
	}
	b := traceError("cannot run the default prompts within --trace-memory-mb", fmt.Sprintf("the default prompts cannot run: %v", err))
	return &b, nil
}

// traceTokenizer is the checkpoint's tokenizer as trace/ loaded it, once
// for the prompts and, for V4.1, the Engram token map: tok is nil when
// the checkpoint has none or err says why it cannot be read.
type traceTokenizer struct {
	tok *tokenizer.Tokenizer
	err error
}

func loadTraceTokenizer(s *Set) traceTokenizer {
	tok, err := s.Cat.Tokenizer()
	return traceTokenizer{tok, err}
}

// encode encodes the prompts (the defaults unless the user gave some) for
// a vocabulary of vocab ids. A tokenizer that cannot be read is a
// problem, not a failure, for prompts of token ids; failed is trace/'s
// ERROR.txt when the default prompts cannot be encoded, and err says why
// a user's cannot.
func (t traceTokenizer) encode(s *Set, prompts *[]trace.Prompt, user bool, vocab int) (problems []string, failed *Built, err error) {
	if !user {
		*prompts = trace.DefaultPrompts()
	}
	if err := trace.Encode(*prompts, t.tok, vocab); err != nil {
		if t.err != nil && errors.Is(err, trace.ErrNoTokenizer) {
			// Say why there is no tokenizer, not that there is none.
			err = fmt.Errorf("the prompts are text, and tokenizer.json cannot be read: %w", t.err)
		}
		if user {
			return nil, &Built{}, fmt.Errorf("--trace-prompts %s: %w", s.option("trace", "trace-prompts"), err)
		}
		summary := "cannot run the default prompts"
		if t.err != nil {
			summary += " without a usable tokenizer.json"
		}
		b := traceError(summary, fmt.Sprintf("the default prompts cannot run: %v", err))
		return nil, &b, nil
	}
	if t.err != nil {
		problems = append(problems, fmt.Sprintf("tokenizer.json: %v; tokens are shown as null", t.err))
	}
	return problems, nil, nil
}

// traceTensors lays out f, a safetensors file of activations, whose
// blocks run what they need (a layer, or every layer and the head for
// the logits) when first read.
func (s *Set) traceTensors(id string, f trace.File) (*vfile.File, error) {
	var outs []tensorfile.Out
	for _, a := range f.Tensors {
		data := tensorfile.RowBlocks(id+"/"+a.Name, int64(a.Rows()), a.RowBytes(), func(ctx context.Context, lo, hi int64, dst []byte) error {
			return f.Read(ctx, a, int(lo), int(hi), dst)
		})
		outs = append(outs, tensorfile.Out{Name: a.Name, DType: a.DType, Shape: a.Shape, Data: data, Codec: "trace"})
	}
	return s.tensorFile("trace", outs)
}

// traceError is a trace/ that holds only ERROR.txt: the reason, then
// its details one per line. The log gets the summary alone.
func traceError(summary, reason string, details ...string) Built {
	return Built{Root: tree("", map[string]*vfile.Node{"ERROR.txt": {File: vfile.NewFile(vfile.Bytes(trace.ErrorText("trace/: "+reason, details...)))}}),
		Warnings: []string{traceWarning(summary)}}
}

// traceWarning is the one log line of a mount whose trace/ has an
// ERROR.txt: a model's list of missing features or layer problems can run
// to dozens of lines, which belong in the file, not in every mount's log.
func traceWarning(summary string) string {
	return "trace/ " + summary + "; details in trace/ERROR.txt"
}

// traceBudget refuses prompts whose trace would hold more than
// --trace-memory-mb (trace.Within).
func (s *Set) traceBudget(c trace.Cost, prompts []trace.Prompt) error {
	budget, err := traceMemory(s.option("trace", "trace-memory-mb"))
	if err != nil {
		return err
	}
	return trace.Within(c, prompts, budget)
}

// traceStarted counts a tracer's cost in the working memory once it first
// computes (trace.Options.Started), not while nothing reads it.
func (s *Set) traceStarted(c trace.Cost) { s.startWorking(c.Total()) }

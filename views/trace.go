package views

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
	v4 "github.com/dsfs/dsfs/trace/v4"
	"github.com/dsfs/dsfs/vfile"
)

// traceOptions are trace/'s options.
var traceOptions = []Option{
	{Name: "trace-prompts", Usage: "JSON list of prompts for trace/, each {id, label, text} or {id, label, token_ids} (default: the seed's four prompts)", File: true},
	{Name: "device", Usage: "where trace/ runs decoder layers: auto (CUDA when a GPU and its libraries load, else the CPU), cpu or cuda", Default: "auto", Check: trace.CheckDevice},
	{Name: "trace-precision", Usage: "how trace/ runs DeepSeek-V4 layers: a8 (FP8 activations into FP8/FP4 linears, as DeepSeek's reference) or fp32", Default: "a8"},
	{Name: "trace-memory-mb", Usage: "memory trace/ may hold outside the block cache, in MiB: prompts whose trace would need more are refused at mount", Default: strconv.Itoa(trace.DefaultMemoryMiB), Kind: IntOption, Check: checkTraceMemory},
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

// withinBudget refuses prompts whose trace would hold more than
// --trace-memory-mb (trace.Cost), before anything runs: the user's with
// an error, the defaults with ERROR.txt. It closes what out started when
// it refuses, and counts the cost in out's working memory when it does
// not.
func (s *Set) withinBudget(out *Built, c trace.Cost, prompts []trace.Prompt, user bool) (failed *Built, err error) {
	budget, err := traceMemory(s.option("trace", "trace-memory-mb"))
	if err == nil {
		err = trace.Within(c, prompts, budget)
	}
	if err == nil {
		out.Working += c.Total()
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

// buildTrace is the trace/ view: files whose reading runs decoder layers
// on the prompts (DESIGN.md, trace/). A checkpoint it cannot run gets
// ERROR.txt saying why instead; a bad --trace-prompts file or --device
// fails the mount, since the user asked for them.
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
	if err := trace.CheckDevice(s.option("trace", "device")); err != nil {
		return out, fmt.Errorf("--device: %w", err)
	}
	if _, err := tracePrecision(s.option("trace", "trace-precision")); err != nil {
		return out, err
	}
	switch s.Cat.Config.Family {
	case checkpoint.DeepSeekV41:
		return buildTraceV41(s, prompts, user)
	case checkpoint.DeepSeekV4:
		if what, missing := v4.Missing(s.Cat.ConfigBytes); missing != nil {
			return traceError("cannot run "+what, "cannot run "+what+"; the engine lacks:", missing...), nil
		}
		return buildTraceV4(s, prompts, user)
	}
	m, err := deepseek2.Open(s.Cat)
	if ue := (*deepseek2.UnsupportedError)(nil); errors.As(err, &ue) {
		return traceError("cannot run "+ue.What, "cannot run "+ue.What+"; the engine lacks:", ue.Missing...), nil
	}
	if err != nil {
		return traceError("cannot read the model", err.Error()), nil
	}
	tok := loadTraceTokenizer(s)
	problems, failed, err := tok.encode(s, &prompts, user, m.Config.Vocab)
	if failed != nil || err != nil {
		return *failed, err
	}
	// The backend starts only for a model it can run: CUDA compiles its
	// kernels and takes device memory.
	backend, note, err := s.traceBackend()
	if err != nil {
		return out, fmt.Errorf("--device: %w", err)
	}
	if note != "" {
		out.Warnings = append(out.Warnings, note)
	}
	if c, ok := backend.(io.Closer); ok {
		out.Closers = append(out.Closers, c)
	}
	tr := trace.New(m, backend, prompts, tok.tok, slog.Default())
	if failed, err := s.withinBudget(&out, tr.Cost(), prompts, user); failed != nil || err != nil {
		return *failed, err
	}
	out.Stats = func() any {
		return map[string]any{"layer_forwards": tr.Forwards(), "backend": backend.Name()}
	}
	for l := range m.Checked() {
		for _, p := range m.Problems(l) {
			problems = append(problems, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	if n := tr.Layers(); n < m.Config.Layers {
		problems = append(problems, fmt.Sprintf("layers %d-%d are not served: each needs the layers before it", n, m.Config.Layers-1))
	}

	pj, err := tr.PromptsJSON()
	if err != nil {
		return out, err
	}
	files := map[string]*vfile.Node{
		"prompts.json": {File: vfile.NewFile(vfile.Bytes(pj))}, // known at mount, like the tensor shapes
		"trace.json":   {Doc: vfile.NewDoc(tr.TraceJSON)},
	}
	width := max(2, len(fmt.Sprint(m.Config.Layers-1)))
	for l := range tr.Layers() {
		name := fmt.Sprintf("layers/%0*d", width, l)
		files[name+".json"] = &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) { return tr.LayerJSON(ctx, l) })}
		f, err := s.traceLayerFile(tr, l, "trace/"+name+".safetensors")
		if err != nil {
			return out, err
		}
		files[name+".safetensors"] = &vfile.Node{File: f}
	}
	if len(problems) > 0 {
		files["ERROR.txt"] = errorText(problems)
		out.Warnings = append(out.Warnings, traceWarning(fmt.Sprintf("serves part of the model (%d problems)", len(problems))))
	}
	out.Root = tree("", files)
	return out, nil
}

// traceTokenizer is the checkpoint's tokenizer as trace/ loaded it, once
// for the prompts and, for V4.1, the Engram token map: tok is nil when
// the checkpoint has none or err says why it cannot be read.
type traceTokenizer struct {
	tok *tokenizer.Tokenizer
	err error
}

func loadTraceTokenizer(s *Set) traceTokenizer {
	tok, err := trace.LoadTokenizer(s.Cat)
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

// traceBackend starts the backend of --device through Opt.Backend, or
// the CPU when there is none.
func (s *Set) traceBackend() (backend.Backend, string, error) {
	device := s.option("trace", "device")
	if s.Opt.Backend != nil {
		return s.Opt.Backend(device)
	}
	if device == "cuda" {
		return nil, "", errors.New("cuda: no CUDA backend given")
	}
	return backend.NewCPU(), "", nil
}

// traceLayerFile lays out layer l's activations as a safetensors file
// whose blocks run the layer when first read.
func (s *Set) traceLayerFile(tr *trace.Tracer, l int, id string) (*vfile.File, error) {
	var outs []tensorfile.Out
	for _, a := range tr.Activations(l) {
		data := tensorfile.RowBlocks(id+"/"+a.Name, int64(a.Rows), a.RowBytes(), func(ctx context.Context, lo, hi int64, dst []byte) error {
			return tr.ReadActivation(ctx, l, a, int(lo), int(hi), dst)
		})
		outs = append(outs, tensorfile.Out{Name: a.Name, DType: a.DType, Shape: a.Shape(), Data: data, Codec: "trace"})
	}
	return s.tensorFile("trace", outs)
}

// traceError is a trace/ that holds only ERROR.txt: the reason, then
// its details one per line. The log gets the summary alone.
func traceError(summary, reason string, details ...string) Built {
	var b strings.Builder
	b.WriteString("trace/: " + reason + "\n")
	for _, d := range details {
		b.WriteString("- " + d + "\n")
	}
	return Built{Root: tree("", map[string]*vfile.Node{"ERROR.txt": {File: vfile.NewFile(vfile.Bytes(b.String()))}}),
		Warnings: []string{traceWarning(summary)}}
}

// traceWarning is the one log line of a mount whose trace/ has an
// ERROR.txt: a model's list of missing features or layer problems can run
// to dozens of lines, which belong in the file, not in every mount's log.
func traceWarning(summary string) string {
	return "trace/ " + summary + "; details in trace/ERROR.txt"
}

// errorText is the ERROR.txt of a trace/ that serves part of the model:
// one problem per line.
func errorText(lines []string) *vfile.Node {
	var b strings.Builder
	b.WriteString("trace/ cannot run everything in this checkpoint:\n")
	for _, l := range lines {
		b.WriteString("- " + l + "\n")
	}
	return &vfile.Node{File: vfile.NewFile(vfile.Bytes(b.String()))}
}

package views

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/dsfs/dsfs/trace"
	"github.com/dsfs/dsfs/trace/v4"
)

// buildTraceV4 is trace/ for a DeepSeek-V4 checkpoint: the same files as
// for V2/V3 (the layers' records and activations with V4's tensors), plus
// logits.safetensors. Layers run on the host V4 engine at the precision
// --trace-precision names (a8, the default, or fp32).
func buildTraceV4(s *Set, prompts []trace.Prompt, user bool) (*Node, error) {
	prec, err := tracePrecision(s.Opt.TracePrecision)
	if err != nil {
		return nil, err
	}
	var inference []byte
	for _, f := range s.Cat.Files {
		if f.Name == "inference/config.json" {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				return s.traceError("cannot read inference/config.json", fmt.Sprintf("inference/config.json: %v", err)), nil
			}
			inference = b
		}
	}
	m, err := v4.Open(s.Cat, inference)
	if err != nil {
		return s.traceError("cannot read the model", err.Error()), nil
	}
	var problems []string
	tok, err := trace.LoadTokenizer(s.Cat)
	if err != nil {
		problems = append(problems, fmt.Sprintf("tokenizer.json: %v; tokens are shown as null", err))
	}
	if !user {
		prompts = trace.DefaultPrompts()
	}
	if err := trace.Encode(prompts, tok, m.Config.Vocab); err != nil {
		if user {
			return nil, fmt.Errorf("--trace-prompts %s: %w", s.Opt.TracePrompts, err)
		}
		summary := "cannot run the default prompts"
		if tok == nil && problems != nil {
			summary += " without a usable tokenizer.json"
		}
		return s.traceError(summary, fmt.Sprintf("the default prompts cannot run: %v", err), problems...), nil
	}
	backend, note, err := trace.NewV4Backend(s.Opt.Device)
	if err != nil {
		return nil, fmt.Errorf("--device: %w", err)
	}
	if note != "" {
		s.warnings = append(s.warnings, note)
	}
	if c, ok := backend.(io.Closer); ok {
		s.closers = append(s.closers, c)
	}
	m.SetBackend(backend)
	s.working += traceWorkingMemory
	tr := trace.NewV4(m, prec, prompts, tok, slog.Default())
	s.stats["trace"] = func() any {
		return map[string]any{"layer_forwards": tr.Forwards(), "backend": tr.BackendName(), "precision": string(prec)}
	}
	for l := range m.Checked() {
		for _, p := range m.Problems(l) {
			problems = append(problems, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	for _, p := range m.HeadProblems() {
		problems = append(problems, "head: "+p)
	}
	if n := tr.Layers(); n < m.Config.Layers {
		problems = append(problems, fmt.Sprintf("layers %d-%d are not served: each needs the layers before it", n, m.Config.Layers-1))
	}
	pj, err := tr.PromptsJSON()
	if err != nil {
		return nil, err
	}
	files := map[string]*Node{
		"prompts.json": {File: NewFile(Bytes(pj))},
		"trace.json":   {Doc: NewDoc(tr.TraceJSON)},
	}
	width := max(2, len(fmt.Sprint(m.Config.Layers-1)))
	for l := range tr.Layers() {
		name := fmt.Sprintf("layers/%0*d", width, l)
		files[name+".json"] = &Node{Doc: NewDoc(func(ctx context.Context) ([]byte, error) { return tr.LayerJSON(ctx, l) })}
		f, err := traceV4File(tr, l, tr.Activations(l), "trace/"+name+".safetensors")
		if err != nil {
			return nil, err
		}
		files[name+".safetensors"] = &Node{File: f}
	}
	if tr.Layers() == m.Config.Layers && len(m.HeadProblems()) == 0 {
		f, err := traceV4File(tr, -1, tr.LogitActivations(), "trace/logits.safetensors")
		if err != nil {
			return nil, err
		}
		files["logits.safetensors"] = &Node{File: f}
	}
	if len(problems) > 0 {
		files["ERROR.txt"] = errorText(problems)
		for _, p := range problems {
			s.warnings = append(s.warnings, "trace: "+p)
		}
	}
	return tree("", files), nil
}

// buildTraceV41 is trace/ for a DeepSeek-V4.1 checkpoint: V4's files,
// with the layers' carried pre_mix, candidate masks and Engram hash ids
// and gates. DSpark stages (mtp.*) are listed in trace.json, not run.
func buildTraceV41(s *Set, prompts []trace.Prompt, user bool) (*Node, error) {
	prec, err := tracePrecision(s.Opt.TracePrecision)
	if err != nil {
		return nil, err
	}
	var inference, tokJSON []byte
	for _, f := range s.Cat.Files {
		var dst *[]byte
		switch f.Name {
		case "inference/config.json":
			dst = &inference
		case "tokenizer.json":
			dst = &tokJSON
		default:
			continue
		}
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return s.traceError("cannot read "+f.Name, fmt.Sprintf("%s: %v", f.Name, err)), nil
		}
		*dst = b
	}
	m, err := v4.Open41(s.Cat, inference, tokJSON)
	if err != nil {
		return s.traceError("cannot read the model", err.Error()), nil
	}
	var problems []string
	tok, err := trace.LoadTokenizer(s.Cat)
	if err != nil {
		problems = append(problems, fmt.Sprintf("tokenizer.json: %v; tokens are shown as null", err))
	}
	if !user {
		prompts = trace.DefaultPrompts()
	}
	if err := trace.Encode(prompts, tok, m.Config.Vocab); err != nil {
		if user {
			return nil, fmt.Errorf("--trace-prompts %s: %w", s.Opt.TracePrompts, err)
		}
		return s.traceError("cannot run the default prompts", fmt.Sprintf("the default prompts cannot run: %v", err), problems...), nil
	}
	backend, note, err := trace.NewV4Backend(s.Opt.Device)
	if err != nil {
		return nil, fmt.Errorf("--device: %w", err)
	}
	if note != "" {
		s.warnings = append(s.warnings, note)
	}
	if c, ok := backend.(io.Closer); ok {
		s.closers = append(s.closers, c)
	}
	m.SetBackend(backend)
	s.working += traceWorkingMemory
	tr := trace.NewV41(m, prec, prompts, tok, slog.Default())
	s.stats["trace"] = func() any {
		return map[string]any{"layer_forwards": tr.Forwards(), "backend": tr.BackendName(), "precision": string(prec)}
	}
	for l := range m.Config.Layers {
		for _, p := range m.Problems(l) {
			problems = append(problems, fmt.Sprintf("layer %d: %s", l, p))
		}
	}
	for _, p := range m.HeadProblems() {
		problems = append(problems, "head: "+p)
	}
	if n := tr.Layers(); n < m.Config.Layers {
		problems = append(problems, fmt.Sprintf("layers %d-%d are not served: each needs the layers before it", n, m.Config.Layers-1))
	}
	pj, err := tr.PromptsJSON()
	if err != nil {
		return nil, err
	}
	files := map[string]*Node{
		"prompts.json": {File: NewFile(Bytes(pj))},
		"trace.json":   {Doc: NewDoc(tr.TraceJSON)},
	}
	width := max(2, len(fmt.Sprint(m.Config.Layers-1)))
	for l := range tr.Layers() {
		name := fmt.Sprintf("layers/%0*d", width, l)
		files[name+".json"] = &Node{Doc: NewDoc(func(ctx context.Context) ([]byte, error) { return tr.LayerJSON(ctx, l) })}
		f, err := traceV4File(tr, l, tr.Activations(l), "trace/"+name+".safetensors")
		if err != nil {
			return nil, err
		}
		files[name+".safetensors"] = &Node{File: f}
	}
	if tr.Layers() == m.Config.Layers && len(m.HeadProblems()) == 0 {
		f, err := traceV4File(tr, -1, tr.LogitActivations(), "trace/logits.safetensors")
		if err != nil {
			return nil, err
		}
		files["logits.safetensors"] = &Node{File: f}
	}
	if len(problems) > 0 {
		files["ERROR.txt"] = errorText(problems)
		for _, p := range problems {
			s.warnings = append(s.warnings, "trace: "+p)
		}
	}
	return tree("", files), nil
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

// activationReader is a V4 or V4.1 tracer.
type activationReader interface {
	ReadActivation(ctx context.Context, l int, a trace.V4Activation, r0, r1 int, dst []byte) error
}

// traceV4File lays out activations as a safetensors file whose blocks
// run what they need (layer l, or every layer and the head for l = -1)
// when first read.
func traceV4File(tr activationReader, l int, acts []trace.V4Activation, id string) (*File, error) {
	var outs []Out
	for _, a := range acts {
		data := rowBlocks(id+"/"+a.Name, int64(a.Rows()), a.RowBytes(), func(ctx context.Context, lo, hi int64, dst []byte) error {
			return tr.ReadActivation(ctx, l, a, int(lo), int(hi), dst)
		})
		outs = append(outs, Out{Name: a.Name, DType: a.DType, Shape: a.Shape, Data: data})
	}
	return SafetensorsFile("trace", outs)
}

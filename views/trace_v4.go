package views

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/trace"
	v4 "github.com/dsfs/dsfs/trace/v4"
	"github.com/dsfs/dsfs/vfile"
)

// buildTraceV4 is trace/ for a DeepSeek-V4 checkpoint: the same files as
// for V2/V3 (the layers' records and activations with V4's tensors), plus
// logits.safetensors. Layers run on the host V4 engine at the precision
// --trace-precision names (a8, the default, or fp32).
func buildTraceV4(s *Set, prompts []trace.Prompt, user bool) (Built, error) {
	var out Built
	prec, err := tracePrecision(s.Opt.TracePrecision)
	if err != nil {
		return out, err
	}
	var inference []byte
	for _, f := range s.Cat.Files {
		if f.Name == "inference/config.json" {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				return traceError("cannot read inference/config.json", fmt.Sprintf("inference/config.json: %v", err)), nil
			}
			inference = b
		}
	}
	m, err := v4.Open(s.Cat, inference)
	if err != nil {
		return traceError("cannot read the model", err.Error()), nil
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
			return out, fmt.Errorf("--trace-prompts %s: %w", s.Opt.TracePrompts, err)
		}
		return traceError("cannot run the default prompts", fmt.Sprintf("the default prompts cannot run: %v", err), problems...), nil
	}
	if s.Opt.Device == "cuda" {
		out.Warnings = append(out.Warnings, "trace: DeepSeek-V4 layers run on the CPU; the CUDA backend has no V4 kernels yet")
	}
	out.Working += traceWorkingMemory
	tr := trace.NewV4(m, prec, prompts, tok, slog.Default())
	out.Stats = func() any {
		return map[string]any{"layer_forwards": tr.Forwards(), "backend": "cpu", "precision": string(prec)}
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
		return out, err
	}
	files := map[string]*vfile.Node{
		"prompts.json": {File: vfile.NewFile(vfile.Bytes(pj))},
		"trace.json":   {Doc: vfile.NewDoc(tr.TraceJSON)},
	}
	width := max(2, len(fmt.Sprint(m.Config.Layers-1)))
	for l := range tr.Layers() {
		name := fmt.Sprintf("layers/%0*d", width, l)
		files[name+".json"] = &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) { return tr.LayerJSON(ctx, l) })}
		f, err := s.traceV4File(tr, l, tr.Activations(l), "trace/"+name+".safetensors")
		if err != nil {
			return out, err
		}
		files[name+".safetensors"] = &vfile.Node{File: f}
	}
	if tr.Layers() == m.Config.Layers && len(m.HeadProblems()) == 0 {
		f, err := s.traceV4File(tr, -1, tr.LogitActivations(), "trace/logits.safetensors")
		if err != nil {
			return out, err
		}
		files["logits.safetensors"] = &vfile.Node{File: f}
	}
	if len(problems) > 0 {
		files["ERROR.txt"] = errorText(problems)
		for _, p := range problems {
			out.Warnings = append(out.Warnings, "trace: "+p)
		}
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
func (s *Set) traceV4File(tr *trace.V4Tracer, l int, acts []trace.V4Activation, id string) (*vfile.File, error) {
	var outs []tensorfile.Out
	for _, a := range acts {
		data := tensorfile.RowBlocks(id+"/"+a.Name, int64(a.Rows()), a.RowBytes(), func(ctx context.Context, lo, hi int64, dst []byte) error {
			return tr.ReadActivation(ctx, l, a, int(lo), int(hi), dst)
		})
		outs = append(outs, tensorfile.Out{Name: a.Name, DType: a.DType, Shape: a.Shape, Data: data, Codec: "trace"})
	}
	return s.tensorFile("trace", outs)
}

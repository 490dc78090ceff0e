package trace

import (
	"context"
	"fmt"
	"strings"
)

// File is one file of trace/ as Files lists it: exactly one of Bytes
// (known at mount), Doc (generated when first read) and Tensors (a
// safetensors file of activations, whose rows Read writes).
type File struct {
	Name    string // slash-separated, relative to trace/
	Bytes   []byte
	Doc     func(ctx context.Context) ([]byte, error)
	Tensors []Activation
	Read    func(ctx context.Context, a Activation, r0, r1 int, dst []byte) error
}

// Files lists trace/ for tr, a tracer of a model of layers layers with
// problems: prompts.json, trace.json, each runnable layer's record
// (layers/NN.json) and activations (layers/NN.safetensors), the logits
// when every layer can run and the family serves them, and ERROR.txt
// listing the problems, with the layers that are not served. The figures
// are documents beside them: each routing layer's expert load over all
// prompts (layers/NN.load.png) and, when a layer routes, each prompt's
// route map over every layer (routes/ID.png).
func Files(tr Tracer, layers int, problems []string) ([]File, error) {
	pj, err := tr.PromptsJSON()
	if err != nil {
		return nil, err
	}
	files := []File{
		{Name: "prompts.json", Bytes: pj}, // known at mount, like the tensor shapes
		{Name: "trace.json", Doc: tr.TraceJSON},
	}
	width := max(2, len(fmt.Sprint(layers-1)))
	anyRouted := false
	for l := range tr.Layers() {
		name := fmt.Sprintf("layers/%0*d", width, l)
		acts := tr.Activations(l)
		files = append(files,
			File{Name: name + ".json", Doc: func(ctx context.Context) ([]byte, error) { return tr.LayerJSON(ctx, l) }},
			File{Name: name + ".safetensors", Tensors: acts, Read: func(ctx context.Context, a Activation, r0, r1 int, dst []byte) error {
				return tr.ReadActivation(ctx, l, a, r0, r1, dst)
			}})
		if routed(acts) {
			anyRouted = true
			files = append(files, File{Name: name + ".load.png", Doc: func(ctx context.Context) ([]byte, error) { return loadPNG(ctx, tr, l) }})
		}
	}
	if anyRouted {
		for p, pr := range tr.Prompts() {
			files = append(files, File{Name: "routes/" + pr.ID + ".png", Doc: func(ctx context.Context) ([]byte, error) { return routeMapPNG(ctx, tr, p) }})
		}
	}
	if n := tr.Layers(); n < layers {
		problems = append(problems, fmt.Sprintf("layers %d-%d are not served: each needs the layers before it", n, layers-1))
	}
	if logits := tr.LogitActivations(); logits != nil && tr.Layers() == layers && !headProblem(problems) {
		files = append(files, File{Name: "logits.safetensors", Tensors: logits, Read: func(ctx context.Context, a Activation, r0, r1 int, dst []byte) error {
			return tr.ReadActivation(ctx, -1, a, r0, r1, dst)
		}})
	}
	if len(problems) > 0 {
		files = append(files, File{Name: "ERROR.txt", Bytes: ErrorText("trace/ cannot run everything in this checkpoint:", problems...)})
	}
	return files, nil
}

// headProblem reports whether one of problems keeps the head from running.
func headProblem(problems []string) bool {
	for _, p := range problems {
		if strings.HasPrefix(p, "head: ") {
			return true
		}
	}
	return false
}

// ErrorText is an ERROR.txt: the first line, then each detail on a line
// of its own.
func ErrorText(first string, details ...string) []byte {
	var b strings.Builder
	b.WriteString(first + "\n")
	for _, d := range details {
		b.WriteString("- " + d + "\n")
	}
	return []byte(b.String())
}

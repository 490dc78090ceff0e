package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
)

//go:embed *.cu
var kernelFS embed.FS

// source is one embedded kernel file: a module of its own.
type source struct {
	name    string   // file name, e.g. "norm.cu"
	text    string   // CUDA C
	kernels []string // the extern "C" __global__ functions it defines
}

var kernelDecl = regexp.MustCompile(`extern "C" __global__ void (\w+)\(`)

// sources lists the embedded kernel files in name order.
func sources() ([]source, error) {
	names, err := fs.Glob(kernelFS, "*.cu")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []source
	for _, n := range names {
		b, err := kernelFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		s := source{name: n, text: string(b)}
		for _, m := range kernelDecl.FindAllStringSubmatch(s.text, -1) {
			s.kernels = append(s.kernels, m[1])
		}
		if len(s.kernels) == 0 {
			return nil, fmt.Errorf("%s defines no extern \"C\" __global__ function", n)
		}
		out = append(out, s)
	}
	return out, nil
}

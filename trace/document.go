package trace

import (
	"bytes"
	"encoding/json"
)

// SchemaVersion is the version of the trace documents' layout.
const SchemaVersion = 1

// encode writes v as indented JSON with a final newline, non-ASCII text
// as UTF-8 and <, >, & unescaped (token spellings hold them).
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Environment is where the trace ran.
type Environment struct {
	Go           string  `json:"go"`
	OS           string  `json:"os"`
	Arch         string  `json:"arch"`
	CPUThreads   int     `json:"cpu_threads"`
	Backend      string  `json:"backend"`
	Device       string  `json:"device"`
	GPU          *string `json:"gpu"`
	MatmulKernel string  `json:"matmul_kernel"`
	ComputeDType string  `json:"compute_dtype"`
}

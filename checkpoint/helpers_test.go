package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

// dataByte is byte i of every test shard's data section, so a read can be
// checked without keeping the data.
func dataByte(i int64) byte { return byte(i*7 + 3) }

// writeShard writes a valid shard of specs (laid out like the reference
// serializer) under dir and returns its layout.
func writeShard(t testing.TB, dir, name string, specs ...safetensors.Spec) *safetensors.Layout {
	t.Helper()
	l, err := safetensors.NewLayout([]safetensors.Meta{{Key: "format", Value: "pt"}}, specs)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, l.Size-l.DataStart())
	for i := range data {
		data[i] = dataByte(int64(i))
	}
	writeFile(t, dir, name, string(append(append([]byte(nil), l.Header...), data...)))
	return l
}

// rawShard is a shard file of the given header JSON followed by n data
// bytes, with a correct length prefix.
func rawShard(header string, n int) string {
	b := make([]byte, 8, 8+len(header)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return string(append(b, make([]byte, n)...))
}

// writeFile writes content to dir/name, creating directories.
func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeJSON writes v as JSON to dir/name.
func writeJSON(t testing.TB, dir, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, name, string(b))
}

// writeIndex writes a model.safetensors.index.json mapping tensors to shards.
func writeIndex(t testing.TB, dir string, weightMap map[string]string) {
	t.Helper()
	writeJSON(t, dir, IndexName, map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
}

func spec(name string, d safetensors.DType, shape ...int64) safetensors.Spec {
	return safetensors.Spec{Name: name, DType: d, Shape: shape}
}

func mustOpen(t testing.TB, dir string) *Catalog {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

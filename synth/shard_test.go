package synth

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

func readShard(t *testing.T, path string) (*safetensors.Header, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h, b
}

func TestWriteShard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	in := []Tensor{
		{Name: "scale", DType: safetensors.F8E8M0, Shape: []int64{3}, Data: []byte{255, 0, 127}},
		{Name: "w", DType: safetensors.F32, Shape: []int64{2}, Data: []byte{0, 0, 0x80, 0x7f, 0, 0, 0xc0, 0x7f}}, // +Inf, NaN
		{Name: "zeros", DType: safetensors.BF16, Shape: []int64{2, 2}},
	}
	if err := WriteShard(path, []safetensors.Meta{{Key: "format", Value: "pt"}}, in); err != nil {
		t.Fatal(err)
	}
	h, b := readShard(t, path)
	if h.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", h.Metadata)
	}
	// The reference order: F32, BF16, F8_E8M0.
	var order []string
	for _, tt := range h.Tensors {
		order = append(order, tt.Name)
	}
	if got := strings.Join(order, ","); got != "w,zeros,scale" {
		t.Errorf("data order %s, want w,zeros,scale", got)
	}
	for _, want := range in {
		tt, ok := h.Find(want.Name)
		if !ok {
			t.Fatalf("%s missing", want.Name)
		}
		got := b[h.DataStart+tt.Begin : h.DataStart+tt.End]
		data := want.Data
		if data == nil {
			data = make([]byte, tt.Len())
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: %x, want %x", want.Name, got, data)
		}
	}

	for _, tc := range []struct {
		name    string
		tensors []Tensor
	}{
		{"short data", []Tensor{{Name: "a", DType: safetensors.F32, Shape: []int64{2}, Data: []byte{1, 2, 3}}}},
		{"unknown dtype", []Tensor{{Name: "a", DType: "F7", Shape: []int64{2}}}},
		{"duplicate", []Tensor{{Name: "a", DType: safetensors.U8, Shape: []int64{1}}, {Name: "a", DType: safetensors.U8, Shape: []int64{1}}}},
	} {
		p := filepath.Join(t.TempDir(), "bad.safetensors")
		if err := WriteShard(p, nil, tc.tensors); err == nil || !strings.Contains(err.Error(), "bad.safetensors") {
			t.Errorf("%s: error %v, want one naming the file", tc.name, err)
		}
	}
}

func TestPatchTensor(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSpec(TinySpec(), dir); err != nil {
		t.Fatal(err)
	}
	const name = "layers.2.ffn.experts.3.w1.scale"
	c := openCheckpoint(t, dir)
	before := c.read(t, name)
	_, shard := c.tensor(t, name)
	sizeBefore := c.sizes[shard]
	if err := PatchTensor(dir, name, func(b []byte) { b[5] = 255 }); err != nil {
		t.Fatal(err)
	}
	c = openCheckpoint(t, dir) // headers still valid
	after := c.read(t, name)
	before[5] = 255
	if !bytes.Equal(before, after) {
		t.Error("the patch changed other bytes or did not land")
	}
	if c.sizes[shard] != sizeBefore {
		t.Errorf("%s changed size %d -> %d", shard, sizeBefore, c.sizes[shard])
	}
	if err := PatchTensor(dir, "no.such.tensor", func([]byte) {}); err == nil {
		t.Error("patching a missing tensor succeeded")
	}
}

package tensorfile

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/vfile"
)

func TestSafetensorsFileLayout(t *testing.T) {
	outs := []Out{
		{Name: "b.u8", DType: safetensors.U8, Shape: []int64{3}, Data: vfile.Bytes{1, 2, 3}},
		{Name: "a.f32", DType: safetensors.F32, Shape: []int64{2}, Data: vfile.Bytes{0, 0, 128, 63, 0, 0, 0, 64}},
		{Name: "c.scalar", DType: safetensors.F32, Shape: []int64{}, Data: vfile.Bytes{0, 0, 0, 0}},
		{Name: "d.e4m3", DType: safetensors.F8E4M3, Shape: []int64{1, 2}, Data: vfile.Bytes{0x38, 0x40}},
	}
	f, _, err := Layout("test", outs)
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	b, err := io.ReadAll(io.NewSectionReader(vfile.NewReader(f, cache), 0, f.Size()))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	if (8+n)%8 != 0 || b[8] != '{' || b[8+n-1] != ' ' && b[8+n-1] != '}' {
		t.Fatalf("header of %d bytes is not a '{'-led JSON padded to 8: %q", n, b[8:8+n])
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("virtual file does not parse: %v", err)
	}
	if h.Metadata["format"] != "pt" || h.Metadata["dsfs.view"] != "test" || h.Metadata["dsfs.codec"] == "" {
		t.Fatalf("metadata %v", h.Metadata)
	}
	var order []string
	for _, tt := range h.Tensors {
		order = append(order, tt.Name)
		if (h.DataStart+tt.Begin)%int64(tt.DType.Bits()/8) != 0 {
			t.Errorf("%s not aligned to its element size", tt.Name)
		}
	}
	// The reference serializer: dtype rank (F32 before F8_E4M3 before U8), then name.
	want := []string{"a.f32", "c.scalar", "d.e4m3", "b.u8"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	if got := b[h.DataStart+h.Tensors[3].Begin:]; !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("u8 data %v", got)
	}
	if _, _, err := Layout("test", []Out{{Name: "x", DType: safetensors.F32, Shape: []int64{2}, Data: vfile.Bytes{1}}}); err == nil {
		t.Fatal("a segment of the wrong length was accepted")
	}
}

// TestLayHeaderComputedWhenRead: a file laid out with a header ID serves
// the same bytes as one whose header is kept, tail tensors included, and
// keeps no header bytes of its own.
func TestLayHeaderComputedWhenRead(t *testing.T) {
	outs := func() []*Out {
		return []*Out{
			{Name: "w", DType: safetensors.U8, Shape: []int64{8}, Data: vfile.Bytes{1, 2, 3, 4, 5, 6, 7, 8}},
			{Name: "s2", DType: safetensors.F32, Shape: []int64{}, Data: vfile.Bytes{0, 0, 128, 63}, Tail: true},
			{Name: "a", DType: safetensors.BF16, Shape: []int64{4}, Data: vfile.Bytes{1, 0, 2, 0, 3, 0, 4, 0}},
		}
	}
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	read := func(f *vfile.File) []byte {
		b, err := io.ReadAll(io.NewSectionReader(vfile.NewReader(f, cache), 0, f.Size()))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kept, derived := outs(), outs()
	want, wantStart, err := Lay("test", "", kept)
	if err != nil {
		t.Fatal(err)
	}
	got, start, err := Lay("test", "test/file.safetensors", derived)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Segments()[0].(vfile.Small); !ok {
		t.Fatalf("header segment is %T, want one computed when read", got.Segments()[0])
	}
	if start != wantStart || !bytes.Equal(read(got), read(want)) {
		t.Fatalf("a computed header serves other bytes than a kept one")
	}
	for i := range kept {
		if kept[i].Name != derived[i].Name {
			t.Fatalf("data order %s, want %s", derived[i].Name, kept[i].Name)
		}
	}
	if kept[len(kept)-1].Name != "s2" {
		t.Fatalf("the tail tensor is not last: %s", kept[len(kept)-1].Name)
	}
}

package safetensors

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// TestNewLayoutTail: tail tensors come after the others, each part in the
// reference order, and the reader takes the file; a misaligned tail is
// refused.
func TestNewLayoutTail(t *testing.T) {
	l, err := NewLayoutTail(nil, []Spec{{"w", U8, []int64{16}}, {"b", F32, []int64{2}}},
		[]Spec{{"z.s2", F32, []int64{}}, {"a.s2", F32, []int64{}}})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, tt := range l.Tensors {
		order = append(order, tt.Name)
	}
	if want := []string{"b", "w", "a.s2", "z.s2"}; !slices.Equal(order, want) {
		t.Errorf("data order %v, want %v", order, want)
	}
	file := append(append([]byte(nil), l.Header...), make([]byte, l.Size-int64(len(l.Header)))...)
	h, err := ReadHeader(bytes.NewReader(file), int64(len(file)))
	if err != nil || len(h.Tensors) != 4 {
		t.Fatalf("reading it back: %v", err)
	}
	if _, err := NewLayoutTail(nil, []Spec{{"w", U8, []int64{3}}}, []Spec{{"s", F32, []int64{}}}); err == nil {
		t.Error("a tail F32 at offset 3 was laid out")
	}
}

// TestAppendString: names are written as serde_json writes them (no HTML
// escaping), whether they take the plain path or the encoder's.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "layers.0.ffn.experts.7.w1.weight", "a<b>&c", "quote\"back\\slash",
		"tab\tnl\n\x01", "del\x7f", "é ü 中", "bad\xffutf8", "line\u2028sep"} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
		if got := appendString([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("%q: %s, want %s", s, got[1:], want)
		}
	}
}

// TestPlanLayoutTail: planning a layout places every tensor and sizes the
// file as laying it out does, header included, without writing it.
func TestPlanLayoutTail(t *testing.T) {
	meta := []Meta{{"format", "pt"}, {"view", "odd \"<name>\""}}
	specs := []Spec{{"w", U8, []int64{16}}, {"b", F32, []int64{2, 3}}, {"é\x01", BF16, []int64{4}}}
	tail := []Spec{{"z.s2", F32, []int64{}}}
	want, err := NewLayoutTail(meta, specs, tail)
	if err != nil {
		t.Fatal(err)
	}
	got, err := PlanLayoutTail(meta, append(slices.Clone(specs), tail...), len(specs))
	if err != nil {
		t.Fatal(err)
	}
	if got.Header != nil || got.Tensors != nil || got.Size != want.Size || got.DataStart() != want.DataStart() ||
		got.DataStart() != int64(len(want.Header)) || !slices.Equal(got.Order, want.Order) {
		t.Fatalf("plan: size %d, data at %d, order %v; layout: size %d, data at %d, order %v",
			got.Size, got.DataStart(), got.Order, want.Size, want.DataStart(), want.Order)
	}
	empty, err := PlanLayoutTail(nil, nil, 0)
	if err != nil || empty.DataStart() != empty.Size || empty.Size != 8+8 {
		t.Fatalf("empty plan: %+v, %v", empty, err)
	}
}

// TestLayoutRefusesBadSpecs: a duplicate name (also across dtypes and
// between the parts), the reserved name and an unknown dtype are refused,
// naming the tensor, by laying out and by planning alike.
func TestLayoutRefusesBadSpecs(t *testing.T) {
	for _, tt := range []struct {
		name        string
		specs, tail []Spec
		want        string
	}{
		{"duplicate", []Spec{{"a", U8, []int64{8}}, {"b", U8, []int64{8}}, {"a", U8, []int64{8}}}, nil, `tensor "a": duplicate or reserved name`},
		{"across dtypes", []Spec{{"a", U8, []int64{8}}, {"a", F32, []int64{2}}}, nil, `tensor "a": duplicate or reserved name`},
		{"head and tail", []Spec{{"a", U8, []int64{8}}}, []Spec{{"a", F32, []int64{}}}, `tensor "a": duplicate or reserved name`},
		{"reserved", []Spec{{MetadataKey, U8, []int64{8}}}, nil, `tensor "__metadata__": duplicate or reserved name`},
		{"unknown dtype", []Spec{{"x", "F7", []int64{8}}}, nil, `tensor "x": unknown dtype "F7"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLayoutTail(nil, tt.specs, tt.tail)
			_, perr := PlanLayoutTail(nil, append(slices.Clone(tt.specs), tt.tail...), len(tt.specs))
			if err == nil || err.Error() != tt.want || perr == nil || perr.Error() != tt.want {
				t.Fatalf("laying out: %v; planning: %v; want %s", err, perr, tt.want)
			}
		})
	}
}

// TestAppendHeader: writing the specs again in data order gives the
// header laying them out wrote, after whatever dst holds.
func TestAppendHeader(t *testing.T) {
	meta := []Meta{{"format", "pt"}, {"view", "odd \"<name>\""}}
	specs := []Spec{{"w", U8, []int64{16}}, {"b", F32, []int64{2, 3}}, {"é\x01", BF16, []int64{4}}}
	tail := []Spec{{"z.s2", F32, []int64{}}, {"a.s2", F32, []int64{}}}
	l, err := NewLayoutTail(meta, specs, tail)
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(specs), tail...)
	ordered := make([]Spec, len(all))
	for i, k := range l.Order {
		ordered[i] = all[k]
	}
	got, err := AppendHeader([]byte("prefix"), meta, ordered)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append([]byte("prefix"), l.Header...)) {
		t.Fatalf("appended\n%q\nlaid out\n%q", got[6:], l.Header)
	}
	if _, err := AppendHeader(nil, nil, []Spec{{"x", F32, []int64{-1}}}); err == nil {
		t.Error("a negative dimension was written")
	}
}

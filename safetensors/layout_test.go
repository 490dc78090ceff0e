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

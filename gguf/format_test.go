package gguf_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/internal/ggufread"
)

// pieceBytes is the size from which a KV value is a header piece of its
// own (Layout.Header).
const pieceBytes = 64 << 10

// TestLayoutPieces lays out headers whose tokenizer arrays are large enough
// to be pieces of their own, on random tokens: every header reads back
// as the KVs and tensors it was given, each large value is one piece, and
// Pieces makes equal pieces of different layouts one slice, and only
// those, leaving every header's bytes as they were.
func TestLayoutPieces(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0))
	word := func() string {
		b := make([]byte, 1+rng.IntN(12))
		for i := range b {
			b[i] = byte(' ' + rng.IntN(95))
		}
		return string(b)
	}
	n := 20000 // each array: 80 KB and more, past pieceBytes
	tokens, merges, types := make([]string, n), make([]string, n), make([]int32, n)
	for i := range n {
		tokens[i], merges[i], types[i] = word(), word()+" "+word(), int32(rng.IntN(6))
	}
	other := append([]string(nil), tokens...)
	other[rng.IntN(n)] += "x"
	kvs := func(ftype uint32, toks []string) []gguf.KV {
		return []gguf.KV{
			{"general.architecture", "deepseek2"},
			{"general.alignment", uint32(64)},
			{"general.file_type", ftype},
			{"tokenizer.ggml.tokens", toks},
			{"tokenizer.ggml.token_type", types},
			{"tokenizer.ggml.merges", merges},
			{"tokenizer.ggml.bos_token_id", uint32(0)},
			{"x.small", []float32{1, 2}},
		}
	}
	infos := []gguf.TensorInfo{{Name: "a", Type: gguf.F32, Ne: []int64{64, 3}}, {Name: "b", Type: gguf.Q8_0, Ne: []int64{64}}}
	cases := []struct {
		kvs     []gguf.KV
		tensors []gguf.TensorInfo
	}{
		{kvs(7, tokens), infos},
		{kvs(32, tokens), infos[:1]}, // another recipe, same tokenizer
		{kvs(7, other), infos},       // one token differs
	}
	var layouts []*gguf.Layout
	var before [][]byte
	for i, c := range cases {
		l, err := gguf.NewLayout(c.kvs, c.tensors)
		if err != nil {
			t.Fatal(err)
		}
		h := bytes.Join(l.Header, nil)
		checkHeader(t, fmt.Sprint("layout ", i), l, h, c.kvs, c.tensors)
		var big int
		for _, p := range l.Header {
			if len(p) >= pieceBytes {
				big++
			}
		}
		if big != 3 {
			t.Errorf("layout %d: %d pieces of at least %d bytes, want 3 (tokens, token_type, merges)", i, big, pieceBytes)
		}
		layouts, before = append(layouts, l), append(before, h)
	}
	var pieces gguf.Pieces
	for _, l := range layouts {
		pieces.Share(l)
	}
	for i, l := range layouts {
		if !bytes.Equal(bytes.Join(l.Header, nil), before[i]) {
			t.Errorf("layout %d: sharing changed its header", i)
		}
	}
	same := func(i, j, k int) bool {
		return unsafe.SliceData(layouts[i].Header[k]) == unsafe.SliceData(layouts[j].Header[k])
	}
	// Pieces: 0 up to the tokens' value, 1 tokens, 2 token_type's key,
	// 3 token_type, 4 merges' key, 5 merges, 6 the rest.
	if !same(0, 1, 1) || !same(0, 1, 3) || !same(0, 1, 5) || !same(0, 2, 3) || !same(0, 2, 5) {
		t.Error("equal tokenizer arrays of two layouts are kept twice")
	}
	if same(0, 2, 1) {
		t.Error("the tokens of a layout whose tokens differ were shared")
	}
}

// checkHeader reads h, l's header, with the strict reader and compares it
// with the KVs and tensors l was laid out from.
func checkHeader(t *testing.T, name string, l *gguf.Layout, h []byte, kvs []gguf.KV, tensors []gguf.TensorInfo) {
	t.Helper()
	if int64(len(h)) != l.HeaderSize || l.HeaderSize%l.Alignment != 0 {
		t.Fatalf("%s: header of %d bytes, HeaderSize %d, alignment %d", name, len(h), l.HeaderSize, l.Alignment)
	}
	f, err := ggufread.Read(&zeroTail{head: h, size: l.Size}, l.Size)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if f.DataStart != l.HeaderSize || len(f.Keys) != len(kvs) || len(f.Tensors) != len(tensors) {
		t.Fatalf("%s: data at %d (header %d), %d keys, %d tensors", name, f.DataStart, l.HeaderSize, len(f.Keys), len(f.Tensors))
	}
	for i, kv := range kvs {
		want := reflect.ValueOf(kv.Value)
		got := f.KV[kv.Key]
		if f.Keys[i] != kv.Key {
			t.Fatalf("%s: key %d is %s, want %s", name, i, f.Keys[i], kv.Key)
		}
		if want.Kind() != reflect.Slice {
			if got != kv.Value {
				t.Fatalf("%s: %s = %v, want %v", name, kv.Key, got, kv.Value)
			}
			continue
		}
		arr, ok := got.([]any)
		if !ok || len(arr) != want.Len() {
			t.Fatalf("%s: %s is %T, not an array of %d", name, kv.Key, got, want.Len())
		}
		for j, e := range arr {
			if e != want.Index(j).Interface() {
				t.Fatalf("%s: %s[%d] = %v, want %v", name, kv.Key, j, e, want.Index(j))
			}
		}
	}
	for i, ti := range f.Tensors {
		if ti.Name != tensors[i].Name || ti.Offset != l.Offsets[i] {
			t.Fatalf("%s: tensor %d is %s at %d, want %s at %d", name, i, ti.Name, ti.Offset, tensors[i].Name, l.Offsets[i])
		}
	}
}

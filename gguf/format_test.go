package gguf

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/dsfs/dsfs/internal/ggufread"
)

// TestEncodedValuesArePieces lays out headers whose tokenizer arrays, of
// random tokens, are encoded beforehand: each header has the bytes of
// the same KVs written plainly, reads back as those KVs and tensors, and
// holds the encoded arrays as pieces of their own, the same bytes in
// every layout.
func TestEncodedValuesArePieces(t *testing.T) {
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
	n := 1 + rng.IntN(20000)
	tokens, merges, types := make([]string, n), make([]string, n), make([]int32, n)
	for i := range n {
		tokens[i], merges[i], types[i] = word(), word()+" "+word(), int32(rng.IntN(6))
	}
	kvs := func(ftype uint32, arrays ...any) []KV {
		return []KV{
			{"general.architecture", "deepseek2"},
			{"general.alignment", uint32(64)},
			{"general.file_type", ftype},
			{"tokenizer.ggml.tokens", arrays[0]},
			{"tokenizer.ggml.token_type", arrays[1]},
			{"tokenizer.ggml.merges", arrays[2]},
			{"tokenizer.ggml.bos_token_id", uint32(0)},
			{"x.small", []float32{1, 2}},
		}
	}
	var encoded []any
	for _, v := range []any{tokens, types, merges} {
		e, err := encodeValue(v)
		if err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, e)
	}
	infos := []TensorInfo{{Name: "a", Type: F32, Ne: []int64{64, 3}}, {Name: "b", Type: Q8_0, Ne: []int64{64}}}
	var layouts []*Layout
	for i, c := range []struct {
		ftype   uint32
		tensors []TensorInfo
	}{{7, infos}, {32, infos[:1]}} { // two recipes, one tokenizer
		plain, err := NewLayout(kvs(c.ftype, tokens, types, merges), c.tensors)
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLayout(kvs(c.ftype, encoded...), c.tensors)
		if err != nil {
			t.Fatal(err)
		}
		h := bytes.Join(l.Header, nil)
		if !bytes.Equal(h, bytes.Join(plain.Header, nil)) || l.HeaderSize != plain.HeaderSize || l.Size != plain.Size {
			t.Fatalf("layout %d: the header with encoded values differs from the plain one", i)
		}
		checkHeader(t, fmt.Sprint("layout ", i), l, h, kvs(c.ftype, tokens, types, merges), c.tensors)
		layouts = append(layouts, l)
	}
	// Pieces: 0 up to the tokens' value, 1 tokens, 2 token_type's key,
	// 3 token_type, 4 merges' key, 5 merges, 6 the rest.
	for i, e := range encoded {
		for j, l := range layouts {
			if p := l.Header[2*i+1]; unsafe.SliceData(p) != unsafe.SliceData(e.(encodedValue)) || len(p) != len(e.(encodedValue)) {
				t.Errorf("layout %d: array %d is not the encoded bytes, as a piece of its own", j, i)
			}
		}
	}
}

// checkHeader reads h, l's header, with the strict reader and compares it
// with the KVs and tensors l was laid out from.
func checkHeader(t *testing.T, name string, l *Layout, h []byte, kvs []KV, tensors []TensorInfo) {
	t.Helper()
	if int64(len(h)) != l.HeaderSize || l.HeaderSize%l.Alignment != 0 {
		t.Fatalf("%s: header of %d bytes, HeaderSize %d, alignment %d", name, len(h), l.HeaderSize, l.Alignment)
	}
	file := append(bytes.Clone(h), make([]byte, l.Size-l.HeaderSize)...)
	f, err := ggufread.Read(bytes.NewReader(file), l.Size)
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

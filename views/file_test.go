package views

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/safetensors"
)

// derived is a Blocks segment whose byte i is f(i), computed per block.
func derived(id string, n, blockLen int64) *Blocks {
	return &Blocks{ID: id, N: n, BlockLen: blockLen, Compute: func(_ context.Context, i int64, dst []byte) error {
		for j := range dst {
			dst[j] = byte((i*blockLen + int64(j)) * 7)
		}
		return nil
	}}
}

func TestReaderMatchesConcatenation(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	src := make([]byte, 5000)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	blocks := derived("d", 3001, 256)
	f := NewFile(Bytes("header--"), Range{R: bytes.NewReader(src), Off: 100, N: 1234}, Bytes{}, blocks, Bytes("tail"))
	var want []byte
	want = append(want, "header--"...)
	want = append(want, src[100:1334]...)
	for i := range int64(3001) {
		want = append(want, byte(i*7))
	}
	want = append(want, "tail"...)
	if f.Size() != int64(len(want)) {
		t.Fatalf("Size = %d, want %d", f.Size(), len(want))
	}
	cache := blockcache.New(4096, 2)
	defer cache.Close()
	r := NewReader(f, cache)
	for range 2000 {
		off := rng.Int64N(int64(len(want)) + 10)
		p := make([]byte, rng.IntN(3000))
		n, err := r.ReadAt(p, off)
		end := min(off+int64(len(p)), int64(len(want)))
		if off >= int64(len(want)) {
			if n != 0 || err != io.EOF {
				t.Fatalf("seed %d: ReadAt past end at %d = %d, %v", seed, off, n, err)
			}
			continue
		}
		if !bytes.Equal(p[:n], want[off:end]) {
			t.Fatalf("seed %d: ReadAt(%d, len %d) differs", seed, off, len(p))
		}
		if short := end-off < int64(len(p)); short != (err == io.EOF) || (err != nil && err != io.EOF) {
			t.Fatalf("seed %d: ReadAt(%d, len %d) = %d, %v", seed, off, len(p), n, err)
		}
	}
}

func TestReaderReportsSegmentErrors(t *testing.T) {
	bad := errors.New("source changed")
	f := NewFile(Bytes("ok"), &Blocks{ID: "bad", N: 10, BlockLen: 10,
		Compute: func(context.Context, int64, []byte) error { return bad }})
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	if _, err := NewReader(f, cache).ReadAt(make([]byte, 12), 0); !errors.Is(err, bad) {
		t.Fatalf("ReadAt = %v, want %v", err, bad)
	}
	short := NewFile(Range{R: bytes.NewReader([]byte("abc")), N: 10})
	if _, err := NewReader(short, cache).ReadAt(make([]byte, 10), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadAt of a truncated source = %v, want ErrUnexpectedEOF", err)
	}
}

func TestReadAheadFollowsSequentialReaders(t *testing.T) {
	blocks := derived("ra", 64<<20, 1<<20)
	f := NewFile(blocks)
	cache := blockcache.New(128<<20, 4)
	defer cache.Close()
	r := NewReader(f, cache)
	p := make([]byte, 1<<20)
	for off := int64(0); off < 4<<20; off += 1 << 20 {
		if _, err := r.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
	}
	if s := cache.Stats(); s.ReadAhead == 0 {
		t.Fatalf("no read-ahead for a sequential reader: %+v", s)
	}
}

func TestSafetensorsFileLayout(t *testing.T) {
	outs := []Out{
		{Name: "b.u8", DType: safetensors.U8, Shape: []int64{3}, Data: Bytes{1, 2, 3}},
		{Name: "a.f32", DType: safetensors.F32, Shape: []int64{2}, Data: Bytes{0, 0, 128, 63, 0, 0, 0, 64}},
		{Name: "c.scalar", DType: safetensors.F32, Shape: []int64{}, Data: Bytes{0, 0, 0, 0}},
		{Name: "d.e4m3", DType: safetensors.F8E4M3, Shape: []int64{1, 2}, Data: Bytes{0x38, 0x40}},
	}
	f, err := SafetensorsFile("test", outs)
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(1<<20, 1)
	defer cache.Close()
	b, err := io.ReadAll(io.NewSectionReader(NewReader(f, cache), 0, f.Size()))
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
	if _, err := SafetensorsFile("test", []Out{{Name: "x", DType: safetensors.F32, Shape: []int64{2}, Data: Bytes{1}}}); err == nil {
		t.Fatal("a segment of the wrong length was accepted")
	}
}

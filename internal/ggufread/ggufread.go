// Package ggufread is a strict GGUF v3 reader written from the format's
// specification (ggml/docs/gguf.md and gguf.cpp's checks), independent of
// the gguf package's writer, for the tests: every key and tensor info is
// decoded, duplicates are refused, and tensor offsets must follow ggml's
// strict rule (each the sum of the previous tensors' sizes padded to the
// alignment), with the data section starting at the first multiple of the
// alignment past the header.
package ggufread

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Tensor is one tensor info.
type Tensor struct {
	Name   string
	Type   uint32
	Ne     []int64
	Offset int64 // from the start of the data section
	Size   int64 // bytes, padding excluded
}

// File is a parsed GGUF header.
type File struct {
	KV        map[string]any // scalars as their Go types; arrays as []any
	Keys      []string       // in file order
	Tensors   []Tensor
	Alignment int64
	DataStart int64
}

// typeSizes gives, by ggml type id, weights per block and bytes per block
// of the types the tests meet.
var typeSizes = map[uint32][2]int64{
	0: {1, 4}, 1: {1, 2}, 8: {32, 34}, 10: {256, 84}, 16: {256, 66}, 26: {1, 4}, 30: {1, 2}, 39: {32, 17},
}

type reader struct {
	r   io.Reader
	off int64
	err error
}

func (r *reader) read(n int) []byte {
	if r.err != nil {
		return make([]byte, n)
	}
	b := make([]byte, n)
	_, r.err = io.ReadFull(r.r, b)
	r.off += int64(n)
	return b
}

func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.read(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.read(8)) }

func (r *reader) str() string {
	n := r.u64()
	if n > 1<<30 {
		r.err = fmt.Errorf("string of %d bytes", n)
		return ""
	}
	return string(r.read(int(n)))
}

func (r *reader) value(typ uint32, depth int) any {
	switch typ {
	case 0:
		return r.read(1)[0]
	case 1:
		return int8(r.read(1)[0])
	case 2:
		return binary.LittleEndian.Uint16(r.read(2))
	case 3:
		return int16(binary.LittleEndian.Uint16(r.read(2)))
	case 4:
		return r.u32()
	case 5:
		return int32(r.u32())
	case 6:
		return math.Float32frombits(r.u32())
	case 7:
		b := r.read(1)[0]
		if b > 1 {
			r.err = fmt.Errorf("bool byte %d", b)
		}
		return b == 1
	case 8:
		return r.str()
	case 9:
		if depth > 0 {
			r.err = errors.New("nested array")
			return nil
		}
		et, n := r.u32(), r.u64()
		if n > 1<<30 {
			r.err = fmt.Errorf("array of %d elements", n)
			return nil
		}
		out := make([]any, 0, min(n, 1<<16))
		for range n {
			if r.err != nil {
				return nil
			}
			out = append(out, r.value(et, depth+1))
		}
		return out
	case 10:
		return r.u64()
	case 11:
		return int64(r.u64())
	case 12:
		return math.Float64frombits(r.u64())
	}
	r.err = fmt.Errorf("value type %d", typ)
	return nil
}

// Read parses the header of a GGUF file of the given size.
func Read(ra io.ReaderAt, size int64) (*File, error) {
	r := &reader{r: io.NewSectionReader(ra, 0, size)}
	if string(r.read(4)) != "GGUF" {
		return nil, errors.New("bad magic")
	}
	if v := r.u32(); v != 3 {
		return nil, fmt.Errorf("version %d, want 3", v)
	}
	nt, nkv := int64(r.u64()), int64(r.u64())
	if nt < 0 || nkv < 0 || nt > 1<<24 || nkv > 1<<24 {
		return nil, fmt.Errorf("counts %d tensors, %d keys", nt, nkv)
	}
	f := &File{KV: make(map[string]any), Alignment: 32}
	for range nkv {
		k := r.str()
		v := r.value(r.u32(), 0)
		if r.err != nil {
			return nil, fmt.Errorf("key %q: %w", k, r.err)
		}
		if _, dup := f.KV[k]; dup {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		f.KV[k], f.Keys = v, append(f.Keys, k)
	}
	if a, ok := f.KV["general.alignment"]; ok {
		u, ok := a.(uint32)
		if !ok || u == 0 || u&(u-1) != 0 {
			return nil, fmt.Errorf("general.alignment %v is not a uint32 power of two", a)
		}
		f.Alignment = int64(u)
	}
	names := make(map[string]bool)
	var want int64
	for range nt {
		t := Tensor{Name: r.str()}
		nd := r.u32()
		if nd == 0 || nd > 4 {
			return nil, fmt.Errorf("tensor %q: %d dims", t.Name, nd)
		}
		n := int64(1)
		for range nd {
			d := int64(r.u64())
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dim", t.Name)
			}
			t.Ne = append(t.Ne, d)
			n *= d
		}
		t.Type = r.u32()
		t.Offset = int64(r.u64())
		if r.err != nil {
			return nil, fmt.Errorf("tensor info: %w", r.err)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("duplicate tensor %q", t.Name)
		}
		names[t.Name] = true
		ts, ok := typeSizes[t.Type]
		if !ok {
			return nil, fmt.Errorf("tensor %q: type %d unknown to this reader", t.Name, t.Type)
		}
		if t.Ne[0]%ts[0] != 0 {
			return nil, fmt.Errorf("tensor %q: ne[0] %d not a multiple of the block %d", t.Name, t.Ne[0], ts[0])
		}
		t.Size = n / ts[0] * ts[1]
		if t.Offset != want {
			return nil, fmt.Errorf("tensor %q has offset %d, expected %d", t.Name, t.Offset, want)
		}
		want += (t.Size + f.Alignment - 1) / f.Alignment * f.Alignment
		f.Tensors = append(f.Tensors, t)
	}
	f.DataStart = (r.off + f.Alignment - 1) / f.Alignment * f.Alignment
	if f.DataStart+want > size {
		return nil, fmt.Errorf("data needs %d bytes from %d, file is %d", want, f.DataStart, size)
	}
	pad := make([]byte, f.DataStart-r.off)
	if _, err := ra.ReadAt(pad, r.off); err != nil {
		return nil, err
	}
	for _, b := range pad {
		if b != 0 {
			return nil, errors.New("header padding is not zeros")
		}
	}
	return f, nil
}

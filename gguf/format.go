// Package gguf lays out GGUF files (version 3, the format llama.cpp loads)
// from a checkpoint catalog without reading tensor values: the header
// (key/value metadata and tensor infos) is computed from config.json, the
// tokenizer files and the safetensors headers, and each tensor's data is a
// run of rows a Recipe says how to compute from source bytes. Offsets follow
// ggml's strict rule: tensors contiguous in info order, each padded with
// zeros to general.alignment, the data section starting at the first
// multiple of the alignment past the header.
package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Type is a ggml tensor type.
type Type struct {
	Name         string
	ID           uint32
	BlockWeights int64 // weights per block (1 for plain types)
	BlockBytes   int64 // bytes per block
}

// The ggml types the recipes write (ids from ggml.h / gguf-py).
var (
	F32     = Type{"F32", 0, 1, 4}
	F16     = Type{"F16", 1, 1, 2}
	Q8_0    = Type{"Q8_0", 8, 32, 34}
	Q2_K    = Type{"Q2_K", 10, 256, 84}
	IQ2_XXS = Type{"IQ2_XXS", 16, 256, 66}
	BF16    = Type{"BF16", 30, 1, 2}
	I32     = Type{"I32", 26, 1, 4}
	MXFP4   = Type{"MXFP4", 39, 32, 17}
)

// RowBytes is the size of a row of n weights, which must be a multiple of
// the block size.
func (t Type) RowBytes(n int64) int64 { return n / t.BlockWeights * t.BlockBytes }

// general.file_type values (llama_ftype).
const (
	FileTypeMostlyQ8_0    = 7
	FileTypeMostlyBF16    = 32
	FileTypeMostlyIQ2_XXS = 19
	FileTypeMostlyMXFP4   = 38 // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
)

// QuantizationVersion is GGML_QNT_VERSION, written as
// general.quantization_version.
const QuantizationVersion = 2

// DefaultAlignment is the alignment the recipes write in
// general.alignment: a page, so that a tensor starts on a page of the file.
const DefaultAlignment = 4096

// KV is one metadata pair. Value is one of uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64 or a slice
// of one of them (an ARRAY).
type KV struct {
	Key   string
	Value any
}

// TensorInfo is one tensor of a GGUF file.
type TensorInfo struct {
	Name string
	Type Type
	Ne   []int64 // ggml order: Ne[0] varies fastest (numpy shape reversed)
}

// Rows is the number of rows: the product of Ne[1:].
func (t *TensorInfo) Rows() int64 {
	r := int64(1)
	for _, n := range t.Ne[1:] {
		r *= n
	}
	return r
}

// RowBytes is the size of one row (Ne[0] weights).
func (t *TensorInfo) RowBytes() int64 { return t.Type.RowBytes(t.Ne[0]) }

// Bytes is the tensor's data size, padding excluded.
func (t *TensorInfo) Bytes() int64 { return t.Rows() * t.RowBytes() }

// Layout is a GGUF file's header and where each tensor's data lands.
type Layout struct {
	// Header is everything before the data section, padding included, in
	// pieces that concatenate to it. A value encoded beforehand (the
	// tokenizer's arrays: megabytes) is a piece of its own, the same bytes
	// in every layout that holds it.
	Header [][]byte
	// HeaderSize is the header's length: where the data section starts.
	HeaderSize int64
	// Offsets[i] is tensor i's offset from the start of the data section,
	// as its info records it.
	Offsets []int64
	// Size is the whole file's length: the last tensor is padded too.
	Size      int64
	Alignment int64
}

// Pad is the zero padding after a tensor of n bytes.
func (l *Layout) Pad(n int64) int64 { return pad(n, l.Alignment) - n }

func pad(n, a int64) int64 { return (n + a - 1) / a * a }

// NewLayout lays out a GGUF v3 file of kvs and tensors, in that order. The
// alignment is taken from a general.alignment KV when there is one (it must
// be a uint32 power of two), else ggml's default of 32.
func NewLayout(kvs []KV, tensors []TensorInfo) (*Layout, error) {
	align := int64(32)
	seen := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		if seen[kv.Key] {
			return nil, fmt.Errorf("gguf: duplicate key %s", kv.Key)
		}
		seen[kv.Key] = true
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("gguf: general.alignment %v is not a uint32 power of two", kv.Value)
			}
			align = int64(a)
		}
	}
	// The header is kept for as long as the mount serves the file: its
	// pieces are copies without the buffer's spare capacity, or values
	// encoded once for every layout.
	var b bytes.Buffer
	var pieces [][]byte
	var size int64
	b.WriteString("GGUF")
	le(&b, uint32(3))
	le(&b, int64(len(tensors)))
	le(&b, int64(len(kvs)))
	for _, kv := range kvs {
		writeString(&b, kv.Key)
		if e, ok := kv.Value.(encodedValue); ok {
			pieces = append(pieces, bytes.Clone(b.Bytes()), e)
			size += int64(b.Len() + len(e))
			b.Reset()
			continue
		}
		if err := writeValue(&b, kv.Value, true); err != nil {
			return nil, fmt.Errorf("gguf: key %s: %w", kv.Key, err)
		}
	}
	l := &Layout{Alignment: align, Offsets: make([]int64, len(tensors))}
	names := make(map[string]bool, len(tensors))
	var off int64
	for i, t := range tensors {
		if names[t.Name] {
			return nil, fmt.Errorf("gguf: duplicate tensor %s", t.Name)
		}
		names[t.Name] = true
		if len(t.Ne) == 0 || len(t.Ne) > 4 {
			return nil, fmt.Errorf("gguf: tensor %s has %d dimensions (1 to 4)", t.Name, len(t.Ne))
		}
		if t.Ne[0]%t.Type.BlockWeights != 0 {
			return nil, fmt.Errorf("gguf: tensor %s: row of %d weights is not a multiple of %s's block of %d", t.Name, t.Ne[0], t.Type.Name, t.Type.BlockWeights)
		}
		writeString(&b, t.Name)
		le(&b, uint32(len(t.Ne)))
		for _, n := range t.Ne {
			le(&b, n)
		}
		le(&b, t.Type.ID)
		le(&b, uint64(off))
		l.Offsets[i] = off
		off += pad(t.Bytes(), align)
	}
	l.HeaderSize = pad(size+int64(b.Len()), align)
	last := make([]byte, l.HeaderSize-size)
	copy(last, b.Bytes())
	l.Header = append(pieces, last)
	l.Size = l.HeaderSize + off
	return l, nil
}

// encodedValue is a KV value encoded already, type id included, which
// NewLayout makes a header piece of its own without copying it.
type encodedValue []byte

// encodeValue encodes v as NewLayout would write it.
func encodeValue(v any) (encodedValue, error) {
	var b bytes.Buffer
	if err := writeValue(&b, v, true); err != nil {
		return nil, err
	}
	return encodedValue(bytes.Clone(b.Bytes())), nil
}

// le appends a fixed-size scalar little-endian, as binary.Write would,
// without its reflection and per-call buffer: a deepseek tokenizer is
// some 260 k array elements.
func le(b *bytes.Buffer, v any) {
	var a [8]byte
	switch v := v.(type) {
	case uint8:
		b.WriteByte(v)
	case int8:
		b.WriteByte(byte(v))
	case uint16:
		b.Write(binary.LittleEndian.AppendUint16(a[:0], v))
	case int16:
		b.Write(binary.LittleEndian.AppendUint16(a[:0], uint16(v)))
	case uint32:
		b.Write(binary.LittleEndian.AppendUint32(a[:0], v))
	case int32:
		b.Write(binary.LittleEndian.AppendUint32(a[:0], uint32(v)))
	case float32:
		b.Write(binary.LittleEndian.AppendUint32(a[:0], math.Float32bits(v)))
	case uint64:
		b.Write(binary.LittleEndian.AppendUint64(a[:0], v))
	case int64:
		b.Write(binary.LittleEndian.AppendUint64(a[:0], uint64(v)))
	case float64:
		b.Write(binary.LittleEndian.AppendUint64(a[:0], math.Float64bits(v)))
	default:
		panic(fmt.Sprintf("gguf: no fixed-size encoding for %T", v))
	}
}

func writeString(b *bytes.Buffer, s string) {
	le(b, uint64(len(s)))
	b.WriteString(s)
}

// valueType is the GGUF type id of a scalar Go value.
func valueType(v any) (uint32, bool) {
	switch v.(type) {
	case uint8:
		return 0, true
	case int8:
		return 1, true
	case uint16:
		return 2, true
	case int16:
		return 3, true
	case uint32:
		return 4, true
	case int32:
		return 5, true
	case float32:
		return 6, true
	case bool:
		return 7, true
	case string:
		return 8, true
	case uint64:
		return 10, true
	case int64:
		return 11, true
	case float64:
		return 12, true
	}
	return 0, false
}

// writeValue writes v, preceded by its type id when typed.
func writeValue(b *bytes.Buffer, v any, typed bool) error {
	if id, ok := valueType(v); ok {
		if typed {
			le(b, id)
		}
		switch v := v.(type) {
		case string:
			writeString(b, v)
		case bool:
			if v {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		default:
			le(b, v)
		}
		return nil
	}
	switch v := v.(type) {
	case []string:
		return writeArray(b, v)
	case []int32:
		return writeArray(b, v)
	case []uint32:
		return writeArray(b, v)
	case []float32:
		return writeArray(b, v)
	case []bool:
		return writeArray(b, v)
	}
	return fmt.Errorf("unsupported value type %T", v)
}

// writeArray writes an array value: its element type id, its length and
// the untyped elements.
func writeArray[T string | int32 | uint32 | float32 | bool](b *bytes.Buffer, s []T) error {
	if len(s) > 1<<30 {
		return fmt.Errorf("array of %d elements (at most 2^30)", len(s))
	}
	var zero T
	id, _ := valueType(any(zero))
	le(b, uint32(9))
	le(b, id)
	le(b, uint64(len(s)))
	var a [4]byte
	switch s := any(s).(type) {
	case []string:
		for _, e := range s {
			writeString(b, e)
		}
	case []bool:
		for _, e := range s {
			if e {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		}
	case []int32:
		for _, e := range s {
			b.Write(binary.LittleEndian.AppendUint32(a[:0], uint32(e)))
		}
	case []uint32:
		for _, e := range s {
			b.Write(binary.LittleEndian.AppendUint32(a[:0], e))
		}
	case []float32:
		for _, e := range s {
			b.Write(binary.LittleEndian.AppendUint32(a[:0], math.Float32bits(e)))
		}
	}
	return nil
}

// SplitName is gguf-split's name of shard i (0-based) of n:
// PREFIX-00001-of-0000N.gguf.
func SplitName(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n)
}

// SplitGroups cuts tensors, in order, into consecutive groups of at most
// maxBytes of data each (a tensor larger than maxBytes is a group of its
// own), as gguf-split --split-max-size does.
func SplitGroups(tensors []TensorInfo, maxBytes int64) [][]TensorInfo {
	var groups [][]TensorInfo
	var cur []TensorInfo
	var size int64
	for _, t := range tensors {
		if len(cur) > 0 && size+t.Bytes() > maxBytes {
			groups = append(groups, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.Bytes()
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups
}

// SplitKVs is the metadata of shard i of n: the model's keys in the first
// shard only (as gguf-py writes them), the split.* keys in every one.
func SplitKVs(kvs []KV, i, n, totalTensors int) []KV {
	var out []KV
	if i == 0 {
		out = append(out, kvs...)
	}
	return append(out,
		KV{"split.no", uint16(i)},
		KV{"split.count", uint16(n)},
		KV{"split.tensors.count", int32(totalTensors)})
}

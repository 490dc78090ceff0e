package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// Meta is one __metadata__ entry; a slice of them keeps the key order.
type Meta struct{ Key, Value string }

// Spec describes a tensor to lay out.
type Spec struct {
	Name  string
	DType DType
	Shape []int64
}

// Layout is a laid-out safetensors file: the header bytes (length prefix
// included) followed by tensors in data order.
type Layout struct {
	Header  []byte
	Tensors []Tensor // Begin/End relative to the data section
	Size    int64    // whole file size
}

// DataStart is the absolute offset of the data section.
func (l *Layout) DataStart() int64 { return int64(len(l.Header)) }

// NewLayout lays out tensors in the reference serializer's order (dtype
// rank, then name) with a compact header padded with spaces so that the
// data section starts at a multiple of 8.
func NewLayout(meta []Meta, specs []Spec) (*Layout, error) {
	return NewLayoutTail(meta, specs, nil)
}

// NewLayoutTail is NewLayout with the tail tensors laid out after all the
// others (each part in the reference order). Readers accept it: the format
// asks for contiguous data, not an order (the reference reader sorts by
// offset). A tail tensor that would not start on a multiple of its element
// size is an error.
func NewLayoutTail(meta []Meta, specs, tail []Spec) (*Layout, error) {
	byRank := func(specs []Spec) []Spec {
		specs = append([]Spec(nil), specs...)
		sort.Slice(specs, func(i, j int) bool {
			ri, rj := rank[specs[i].DType], rank[specs[j].DType]
			if ri != rj {
				return ri < rj
			}
			return specs[i].Name < specs[j].Name
		})
		return specs
	}
	head := len(specs)
	specs = append(byRank(specs), byRank(tail)...)
	seen := make(map[string]bool, len(specs))
	for _, s := range specs {
		if !s.DType.Known() {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", s.Name, s.DType)
		}
		if s.Name == MetadataKey || seen[s.Name] {
			return nil, fmt.Errorf("tensor %q: duplicate or reserved name", s.Name)
		}
		seen[s.Name] = true
	}
	var buf bytes.Buffer
	buf.Write(make([]byte, 8))
	buf.WriteByte('{')
	first := true
	if len(meta) > 0 {
		buf.WriteString(`"__metadata__":{`)
		for i, m := range meta {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(&buf, m.Key)
			buf.WriteByte(':')
			writeString(&buf, m.Value)
		}
		buf.WriteByte('}')
		first = false
	}
	l := &Layout{Tensors: make([]Tensor, 0, len(specs))}
	var off int64
	for i, s := range specs {
		n, err := ByteLen(s.DType, s.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", s.Name, err)
		}
		if size := int64(s.DType.Bits() / 8); i >= head && size > 1 && off%size != 0 {
			return nil, fmt.Errorf("tensor %q: would start at offset %d, not a multiple of its %d-byte elements", s.Name, off, size)
		}
		t := Tensor{Name: s.Name, DType: s.DType, Shape: s.Shape, Begin: off, End: off + n}
		off += n
		l.Tensors = append(l.Tensors, t)
		if !first {
			buf.WriteByte(',')
		}
		first = false
		writeString(&buf, s.Name)
		buf.WriteString(`:{"dtype":`)
		writeString(&buf, string(s.DType))
		buf.WriteString(`,"shape":[`)
		for i, d := range s.Shape {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.FormatInt(d, 10))
		}
		buf.WriteString(`],"data_offsets":[`)
		buf.WriteString(strconv.FormatInt(t.Begin, 10))
		buf.WriteByte(',')
		buf.WriteString(strconv.FormatInt(t.End, 10))
		buf.WriteString("]}")
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	// A copy of exact size: a mount keeps ~200 of these headers, and the
	// buffer's spare capacity would double their memory.
	h := bytes.Clone(buf.Bytes())
	binary.LittleEndian.PutUint64(h, uint64(len(h)-8))
	l.Header = h
	l.Size = int64(len(h)) + off
	return l, nil
}

// writeString writes s as a JSON string without HTML escaping, as the
// reference serializer (serde_json) does.
func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s)               // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

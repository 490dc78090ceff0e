package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// Order maps Tensors to what was laid out: Tensors[i] is spec
	// Order[i] of the specs followed by the tail.
	Order []int
	Size  int64 // whole file size

	dataStart int64
}

// DataStart is the absolute offset of the data section.
func (l *Layout) DataStart() int64 { return l.dataStart }

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
	all := make([]Spec, 0, len(specs)+len(tail))
	return layout(meta, append(append(all, specs...), tail...), len(specs), true)
}

// PlanLayoutTail is NewLayoutTail of specs[:head] and the tail specs[head:]
// without the header's bytes, for a caller that makes them only when they
// are read: Header and Tensors are nil, Order says where each spec goes.
func PlanLayoutTail(meta []Meta, specs []Spec, head int) (*Layout, error) {
	return layout(meta, specs, head, false)
}

// layout lays out all[:head] and the tail all[head:], writing the header
// when write is set and only measuring it otherwise.
func layout(meta []Meta, all []Spec, head int, write bool) (*Layout, error) {
	// Sort positions, not specs: Order maps each laid-out tensor back to
	// its spec, and the ranks are looked up once per spec.
	ranks := make([]int, len(all))
	for i, s := range all {
		ranks[i] = rank[s.DType]
	}
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	byRank := func(a, b int) int {
		if n := cmp.Compare(ranks[a], ranks[b]); n != 0 {
			return n
		}
		return strings.Compare(all[a].Name, all[b].Name)
	}
	slices.SortFunc(order[:head], byRank)
	slices.SortFunc(order[head:], byRank)
	// The second of two specs of one name in data order is refused; sorted
	// names find the (rare) duplicates without a map of every name.
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.Name
	}
	slices.Sort(names)
	var dup map[string]bool // duplicate name -> seen in data order
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			if dup == nil {
				dup = make(map[string]bool)
			}
			dup[names[i]] = false
		}
	}
	for _, k := range order {
		s := all[k]
		if !s.DType.Known() {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", s.Name, s.DType)
		}
		seen, isDup := dup[s.Name]
		if s.Name == MetadataKey || seen {
			return nil, fmt.Errorf("tensor %q: duplicate or reserved name", s.Name)
		}
		if isDup {
			dup[s.Name] = true
		}
	}
	l := &Layout{Order: order}
	if write {
		l.Tensors = make([]Tensor, 0, len(all))
	}
	var off int64
	for i, k := range order {
		s := all[k]
		n, err := ByteLen(s.DType, s.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", s.Name, err)
		}
		if size := int64(s.DType.Bits() / 8); i >= head && size > 1 && off%size != 0 {
			return nil, fmt.Errorf("tensor %q: would start at offset %d, not a multiple of its %d-byte elements", s.Name, off, size)
		}
		if write {
			l.Tensors = append(l.Tensors, Tensor{Name: s.Name, DType: s.DType, Shape: s.Shape, Begin: off, End: off + n})
		}
		off += n
	}
	var w headerWriter
	if write {
		// About 100 bytes per tensor; the header is copied at its exact
		// size at the end.
		w.buf = make([]byte, 0, 64+100*len(all))
	}
	writeHeader(&w, meta, all, order)
	l.dataStart = int64(w.n)
	l.Size = l.dataStart + off
	if write {
		// A copy of exact size: a mount keeps ~200 of these headers, and
		// the buffer's spare capacity would double their memory.
		l.Header = bytes.Clone(w.buf)
	}
	return l, nil
}

// AppendHeader appends to dst the header NewLayoutTail writes for specs
// given in data order (a Layout's Order applied to what it laid out). It
// neither sorts nor checks them beyond their sizes, so a header laid out
// once can be written again at the cost of writing it.
func AppendHeader(dst []byte, meta []Meta, specs []Spec) ([]byte, error) {
	for _, s := range specs {
		if _, err := ByteLen(s.DType, s.Shape); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", s.Name, err)
		}
	}
	w := headerWriter{buf: dst}
	if w.buf == nil {
		w.buf = []byte{}
	}
	writeHeader(&w, meta, specs, nil)
	return w.buf, nil
}

// writeHeader writes the header of all laid out in order (nil: as given),
// whose sizes are known to be valid: the length, the metadata, each
// tensor with its offsets, and the padding to a multiple of 8.
func writeHeader(w *headerWriter, meta []Meta, all []Spec, order []int) {
	start := len(w.buf)
	w.str("\x00\x00\x00\x00\x00\x00\x00\x00{") // the length, set at the end
	first := true
	if len(meta) > 0 {
		w.str(`"__metadata__":{`)
		for i, m := range meta {
			if i > 0 {
				w.str(",")
			}
			w.quote(m.Key)
			w.str(":")
			w.quote(m.Value)
		}
		w.str("}")
		first = false
	}
	var off int64
	for i := range all {
		s := all[i]
		if order != nil {
			s = all[order[i]]
		}
		n, _ := ByteLen(s.DType, s.Shape) // checked by the caller
		if !first {
			w.str(",")
		}
		first = false
		w.quote(s.Name)
		w.str(`:{"dtype":`)
		w.quote(string(s.DType))
		w.str(`,"shape":[`)
		for i, d := range s.Shape {
			if i > 0 {
				w.str(",")
			}
			w.int(d)
		}
		w.str(`],"data_offsets":[`)
		w.int(off)
		w.str(",")
		w.int(off + n)
		w.str("]}")
		off += n
	}
	w.str("}")
	for w.n%8 != 0 {
		w.str(" ")
	}
	if w.buf != nil {
		binary.LittleEndian.PutUint64(w.buf[start:], uint64(w.n-8))
	}
}

// headerWriter appends header text to buf, or only counts its length
// when buf is nil.
type headerWriter struct {
	buf []byte
	n   int
}

func (w *headerWriter) str(s string) {
	w.n += len(s)
	if w.buf != nil {
		w.buf = append(w.buf, s...)
	}
}

func (w *headerWriter) int(v int64) {
	var b [20]byte
	d := strconv.AppendInt(b[:0], v, 10)
	w.n += len(d)
	if w.buf != nil {
		w.buf = append(w.buf, d...)
	}
}

// quote writes s as a JSON string.
func (w *headerWriter) quote(s string) {
	if plainJSON(s) {
		w.n += len(s) + 2
		if w.buf != nil {
			w.buf = append(append(append(w.buf, '"'), s...), '"')
		}
		return
	}
	q := appendString(nil, s)
	w.n += len(q)
	if w.buf != nil {
		w.buf = append(w.buf, q...)
	}
}

// appendString appends s as a JSON string without HTML escaping, as the
// reference serializer (serde_json) does. quote writes plain names itself.
func appendString(buf []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// plainJSON reports whether s is printable ASCII with no quote or
// backslash, which JSON writes as it is between quotes (tensor names are).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

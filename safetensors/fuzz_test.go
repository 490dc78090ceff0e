package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dsfs/dsfs/internal/fuzzcheck"
)

// FuzzParseHeader reads arbitrary files. A header that parses must satisfy
// the format's invariants and lay out again, through NewLayout, to a file
// that parses to the same tensors; reading must never allocate much more
// than the input, whatever lengths the input claims.
func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, file []byte) {
		before := fuzzcheck.Allocated()
		h, err := ReadHeader(bytes.NewReader(file), int64(len(file)))
		fuzzcheck.Bounded(t, before, len(file))
		if err == nil {
			checkHeader(t, h, int64(len(file)))
		}
		// The same bytes as a bare header, so that mutations which break
		// the length prefix still reach the JSON parser.
		if len(file) >= 8 {
			before := fuzzcheck.Allocated()
			h, err := ParseHeader(file[8:], -1)
			fuzzcheck.Bounded(t, before, len(file))
			if err == nil {
				checkHeader(t, h, -1)
			}
		}
	})
}

// checkHeader checks the invariants of a parsed header of a file of the
// given size (-1: unknown) and its round trip through NewLayout.
func checkHeader(t *testing.T, h *Header, size int64) {
	t.Helper()
	var end int64
	names := make(map[string]bool)
	for i, ts := range h.Tensors {
		if ts.Begin != end || ts.End < ts.Begin {
			t.Fatalf("tensor %d %q at [%d, %d]: not contiguous after %d", i, ts.Name, ts.Begin, ts.End, end)
		}
		end = ts.End
		if ts.Name == MetadataKey || names[ts.Name] {
			t.Fatalf("tensor %q reserved or repeated", ts.Name)
		}
		names[ts.Name] = true
		// The byte length, computed independently with big integers.
		n := big.NewInt(int64(ts.DType.Bits()))
		for _, d := range ts.Shape {
			if d < 0 {
				t.Fatalf("tensor %q: negative dimension in %v", ts.Name, ts.Shape)
			}
			n.Mul(n, big.NewInt(d))
		}
		if !ts.DType.Known() || n.Cmp(big.NewInt(ts.Len()*8)) != 0 {
			t.Fatalf("tensor %q: %s %v is %v bits, data_offsets give %d bytes", ts.Name, ts.DType, ts.Shape, n, ts.Len())
		}
	}
	if size >= 0 && h.DataStart+end != size {
		t.Fatalf("data ends at %d in a %d-byte file", h.DataStart+end, size)
	}

	var meta []Meta
	for k, v := range h.Metadata {
		meta = append(meta, Meta{k, v})
	}
	sort.Slice(meta, func(i, j int) bool { return meta[i].Key < meta[j].Key })
	specs := make([]Spec, len(h.Tensors))
	for i, ts := range h.Tensors {
		specs[i] = Spec{ts.Name, ts.DType, ts.Shape}
	}
	l, err := NewLayout(meta, specs)
	if err != nil {
		t.Fatalf("NewLayout of a parsed header: %v", err)
	}
	if len(l.Header)%8 != 0 || l.Size != l.DataStart()+end {
		t.Fatalf("layout: header %d bytes, file %d bytes for %d data bytes", len(l.Header), l.Size, end)
	}
	_, err = ReadHeader(bytes.NewReader(l.Header), int64(len(l.Header)))
	if err == nil && end != 0 {
		t.Fatalf("a layout header without its data parsed")
	}
	h2, err := ParseHeader(l.Header[8:], l.Size)
	if err != nil {
		t.Fatalf("laid-out header does not parse: %v\n%s", err, l.Header[8:])
	}
	if got, want := tensorSet(h2), tensorSet(h); got != want {
		t.Fatalf("round trip changed the tensors:\n%s\nwant\n%s", got, want)
	}
	if fmt.Sprint(h2.Metadata) != fmt.Sprint(h.Metadata) { // fmt sorts keys; nil and empty print alike
		t.Fatalf("round trip changed the metadata: %v, want %v", h2.Metadata, h.Metadata)
	}
	if fmt.Sprint(h2.Tensors) != fmt.Sprint(l.Tensors) {
		t.Fatalf("layout places tensors at %v, its header says %v", l.Tensors, h2.Tensors)
	}
}

// tensorSet renders the tensors without their offsets, in name order.
func tensorSet(h *Header) string {
	lines := make([]string, len(h.Tensors))
	for i, ts := range h.Tensors {
		lines[i] = fmt.Sprintf("%q %s %v %d", ts.Name, ts.DType, ts.Shape, ts.Len())
	}
	sort.Strings(lines)
	return fmt.Sprint(lines)
}

// TestParseHeaderRegressions pins the bugs fuzzing found.
func TestParseHeaderRegressions(t *testing.T) {
	tests := []struct {
		header string
		size   int64
		want   string
	}{
		// 2^59 F64 elements are 2^65 bits: the product wrapped to 0 and
		// the tensor parsed as empty.
		{`{"a":{"dtype":"F64","shape":[576460752303423488],"data_offsets":[0,0]}}`, -1, "shape overflows"},
		{`{"a":{"dtype":"C64","shape":[288230376151711744,2],"data_offsets":[0,0]}}`, -1, "shape overflows"},
		// serde_json allows only JSON whitespace after the object.
		{"{}\u00a0", -1, "trailing data"},
		{"{}\u2003", -1, "trailing data"},
		// encoding/json decodes a lone surrogate as U+FFFD, renaming the
		// tensor; serde_json refuses it.
		{`{"layers.0.\udc80w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, -1, `header string "layers.0.\udc80w" holds the lone UTF-16 surrogate escape \udc80`},
		{`{"a\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, -1, `lone UTF-16 surrogate escape \ud800`},
		{`{"a\ud800\u0041":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, -1, `lone UTF-16 surrogate escape \ud800`},
		{`{"__metadata__":{"k":"\\\uDFFF"}}`, -1, `lone UTF-16 surrogate escape \uDFFF`},
	}
	for _, tt := range tests {
		_, err := ParseHeader([]byte(tt.header), tt.size)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseHeader(%q) = %v, want an error saying %q", tt.header, err, tt.want)
		}
	}
	if _, err := ParseHeader([]byte("{} \t\r\n"), 8+6); err != nil {
		t.Errorf("JSON whitespace after the header: %v", err)
	}
	// A pair, an escaped backslash before "udc80", and U+FFFD itself are text.
	for _, name := range []string{`\ud83d\ude00`, `\\udc80`, `\ufffd`, "\uFFFD", "\ufffd"} {
		h, err := ParseHeader([]byte(`{"`+name+`":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`), -1)
		if err != nil {
			t.Errorf("name %s: %v", name, err)
		} else if !utf8.ValidString(h.Tensors[0].Name) {
			t.Errorf("name %s decoded to %q", name, h.Tensors[0].Name)
		}
	}
}

// TestReadHeaderLimit: a header of more tensors than the limit is refused
// when the decoder meets the first one past it.
func TestReadHeaderLimit(t *testing.T) {
	header := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"c":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(append(file, header...), 1, 2, 3)
	for _, tt := range []struct {
		limit int
		want  string
	}{{-1, ""}, {3, ""}, {2, "header holds more than 2 tensors, the limit"}, {0, "more than 0 tensors"}} {
		_, err := ReadHeaderLimit(bytes.NewReader(file), int64(len(file)), tt.limit)
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("limit %d: %v, want %q", tt.limit, err, tt.want)
		}
	}
}

package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"unicode/utf8"
)

// MaxHeaderSize is the reference reader's limit on the JSON header length.
const MaxHeaderSize = 100_000_000

// MetadataKey is the reserved header key holding string metadata.
const MetadataKey = "__metadata__"

// Tensor is one tensor entry of a header. Begin and End are relative to the
// start of the data section, as in the file.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// Len is the tensor's byte length.
func (t Tensor) Len() int64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	Metadata map[string]string
	// Tensors in data order (ascending Begin).
	Tensors []Tensor
	// DataStart is the absolute file offset of the data section (8 + N).
	DataStart int64
}

// An Error says why a header is invalid; Tensor is set when one entry is at fault.
type Error struct {
	Tensor string
	Reason string
}

func (e *Error) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("tensor %q: %s", e.Tensor, e.Reason)
	}
	return e.Reason
}

func errorf(tensor, format string, args ...any) error {
	return &Error{Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
}

// ReadHeader reads and validates the header of a safetensors file of the
// given size. It never allocates more than the header length, which is
// checked against the file size and MaxHeaderSize first.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	return ReadHeaderLimit(r, size, -1)
}

// ReadHeaderLimit is ReadHeader refusing a header of more than maxTensors
// tensors (no bound when negative) before decoding the rest: the reference
// reader's 100 MB holds a million tensors, and each costs its reader far
// more memory than its JSON.
func ReadHeaderLimit(r io.ReaderAt, size int64, maxTensors int) (*Header, error) {
	if size < 8 {
		return nil, errorf("", "file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, errorf("", "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, errorf("", "header length %d runs past the end of the %d-byte file", n, size)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	return parseHeader(buf, size, maxTensors)
}

// ParseHeader validates the JSON header buf of a file of the given size
// (size < 0 skips the check that the data section fills the file exactly).
func ParseHeader(buf []byte, size int64) (*Header, error) {
	return parseHeader(buf, size, -1)
}

// parseHeader is ParseHeader refusing a header of more than maxTensors
// tensors (no bound when negative) as soon as it meets one more.
func parseHeader(buf []byte, size int64, maxTensors int) (*Header, error) {
	if !utf8.Valid(buf) {
		return nil, errorf("", "header is not valid UTF-8")
	}
	if err := checkSurrogates(buf); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, errorf("", "header JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errorf("", "header JSON is not an object")
	}
	h := &Header{DataStart: 8 + int64(len(buf))}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errorf("", "header JSON: %v", err)
		}
		name := tok.(string) // object keys are always strings
		if seen[name] {
			return nil, errorf(name, "duplicate key")
		}
		seen[name] = true
		// Decode each value in place: a RawMessage then Unmarshal would
		// scan every entry three times, and a checkpoint has ~100k.
		if name == MetadataKey {
			if err := dec.Decode(&h.Metadata); err != nil {
				if isSyntaxError(err) {
					return nil, errorf(name, "header JSON: %v", err)
				}
				return nil, errorf("", "__metadata__ must map strings to strings")
			}
			continue
		}
		if len(h.Tensors) == maxTensors {
			return nil, errorf("", "header holds more than %d tensors, the limit", maxTensors)
		}
		var e entryJSON
		if err := dec.Decode(&e); err != nil {
			if isSyntaxError(err) {
				return nil, errorf(name, "header JSON: %v", err)
			}
			return nil, errorf(name, "entry does not parse: %v", err)
		}
		t, err := e.tensor(name)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, errorf("", "header JSON: %v", err)
	}
	// Only JSON whitespace may follow, as in the reference reader (serde_json);
	// bytes.TrimSpace would also accept Unicode spaces such as U+00A0.
	if rest := bytes.Trim(buf[dec.InputOffset():], " \t\r\n"); len(rest) != 0 {
		return nil, errorf("", "header JSON has trailing data")
	}
	if err := h.validate(size); err != nil {
		return nil, err
	}
	return h, nil
}

// checkSurrogates refuses a \u escape of a UTF-16 surrogate that is not
// half of a pair: encoding/json would decode it as U+FFFD and so rename the
// tensor, where the reference reader (serde_json) refuses the header. A
// backslash only ever occurs inside a JSON string, so a scan of escapes
// needs no parser.
func checkSurrogates(buf []byte) error {
	for i := 0; i < len(buf); {
		j := bytes.IndexByte(buf[i:], '\\')
		if j < 0 {
			return nil
		}
		i += j
		r, ok := hexEscape(buf, i)
		switch {
		case !ok:
			i += 2 // any other escape, or one the JSON parser will refuse
			continue
		case r >= 0xd800 && r < 0xdc00:
			if lo, ok := hexEscape(buf, i+6); ok && lo >= 0xdc00 && lo < 0xe000 {
				i += 12
				continue
			}
		case r < 0xdc00 || r >= 0xe000:
			i += 6
			continue
		}
		return errorf("", "header string \"%s\" holds the lone UTF-16 surrogate escape %s, which is not UTF-8 text (the reference reader refuses it)", quotedAround(buf, i), buf[i:i+6])
	}
	return nil
}

// hexEscape decodes a \uXXXX escape at buf[i:].
func hexEscape(buf []byte, i int) (rune, bool) {
	if i+6 > len(buf) || buf[i] != '\\' || buf[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range buf[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// quotedAround returns the raw text of the JSON string holding buf[i],
// escapes as written, for a message.
func quotedAround(buf []byte, i int) string {
	start := i
	for start > 0 && !(buf[start-1] == '"' && !escaped(buf, start-1)) {
		start--
	}
	end := i
	for end < len(buf) && !(buf[end] == '"' && !escaped(buf, end)) {
		end++
	}
	const most = 200
	if end-start > most {
		end = start + most
	}
	return string(buf[start:end])
}

// escaped says whether buf[i] is preceded by an odd run of backslashes.
func escaped(buf []byte, i int) bool {
	n := 0
	for i > 0 && buf[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

type entryJSON struct {
	DType       *string  `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// isSyntaxError tells a JSON syntax error (the header is not JSON) from a
// value of the wrong type (the header is JSON, but not a safetensors one).
func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func (e *entryJSON) tensor(name string) (Tensor, error) {
	if e.DType == nil || e.Shape == nil || len(e.DataOffsets) != 2 {
		return Tensor{}, errorf(name, "entry needs dtype, shape and two data_offsets")
	}
	d := DType(*e.DType)
	if !d.Known() {
		return Tensor{}, errorf(name, "unknown dtype %q", *e.DType)
	}
	for _, s := range e.Shape {
		if s < 0 {
			return Tensor{}, errorf(name, "negative dimension in shape %v", e.Shape)
		}
	}
	b, en := e.DataOffsets[0], e.DataOffsets[1]
	if b > math.MaxInt64/2 || en > math.MaxInt64/2 {
		return Tensor{}, errorf(name, "data_offsets %v out of range", e.DataOffsets)
	}
	return Tensor{Name: name, DType: d, Shape: e.Shape, Begin: int64(b), End: int64(en)}, nil
}

func elements(shape []int64) (int64, bool) {
	n := uint64(1)
	for _, s := range shape {
		hi, lo := bits.Mul64(n, uint64(s))
		if hi != 0 || lo > math.MaxInt64/8 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// ByteLen returns the byte length of a tensor of dtype d and the given shape.
func ByteLen(d DType, shape []int64) (int64, error) {
	n, ok := elements(shape)
	if !ok {
		return 0, errors.New("shape overflows")
	}
	// elements bounds n by MaxInt64/8, which a 64-bit dtype can still
	// overflow; a wrapped product would accept a tiny range for a huge shape.
	hi, b := bits.Mul64(uint64(n), uint64(d.Bits()))
	if hi != 0 || b > math.MaxInt64 {
		return 0, errors.New("shape overflows")
	}
	if b%8 != 0 {
		return 0, fmt.Errorf("%d elements of %s do not fill whole bytes", n, d)
	}
	return int64(b / 8), nil
}

func (h *Header) validate(size int64) error {
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	var end int64
	for _, t := range h.Tensors {
		if t.Begin != end {
			if t.Begin < end {
				return errorf(t.Name, "data_offsets [%d, %d] overlap the previous tensor ending at %d", t.Begin, t.End, end)
			}
			return errorf(t.Name, "data_offsets [%d, %d] leave a gap after offset %d", t.Begin, t.End, end)
		}
		if t.End < t.Begin {
			return errorf(t.Name, "data_offsets [%d, %d] end before they begin", t.Begin, t.End)
		}
		want, err := ByteLen(t.DType, t.Shape)
		if err != nil {
			return errorf(t.Name, "shape %v: %v", t.Shape, err)
		}
		if want != t.Len() {
			return errorf(t.Name, "shape %v of %s needs %d bytes, data_offsets give %d", t.Shape, t.DType, want, t.Len())
		}
		end = t.End
	}
	if size >= 0 && h.DataStart+end != size {
		if h.DataStart+end > size {
			return errorf("", "tensor data ends at %d, past the end of the %d-byte file", h.DataStart+end, size)
		}
		return errorf("", "tensor data ends at %d but the file is %d bytes (trailing bytes not indexed)", h.DataStart+end, size)
	}
	return nil
}

// Find returns the tensor with the given name.
func (h *Header) Find(name string) (Tensor, bool) {
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

package vfile

import (
	"bufio"
	"encoding"
	"encoding/json"
	"io"
	"reflect"
	"regexp"
	"strings"
	"sync"
)

// jsonIndent is the indentation of every dsfs JSON document.
const jsonIndent = "  "

// JSON encodes v as every dsfs JSON document is written: indented by two
// spaces and ending in a newline.
func JSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", jsonIndent)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// MustJSON is JSON for a value built from maps, slices, strings and
// numbers, which cannot fail to encode.
func MustJSON(v any) []byte {
	b, err := JSON(v)
	if err != nil {
		panic(err)
	}
	return b
}

// WriteJSON writes to w the bytes JSON(v) returns, without ever holding
// them all: encoding/json builds a value's whole text before writing any
// of it (twice over when indenting), which for a plan of 100 k tensors is
// hundreds of megabytes of buffers. WriteJSON walks slices, arrays and
// plain structs itself and hands encoding/json only their elements and
// fields, through one Encoder whose buffers are reused, so it holds one
// leaf's text at a time and allocates little.
func WriteJSON(w io.Writer, v any) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	j := &jsonWriter{w: bw, enc: json.NewEncoder(dropNewline{bw})}
	if err := j.value(reflect.ValueOf(v), ""); err != nil {
		return err
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

// jsonWriter is one WriteJSON.
type jsonWriter struct {
	w   *bufio.Writer
	enc *json.Encoder // writes leaves, each in one Write
}

// dropNewline drops the newline json.Encoder writes after every value.
type dropNewline struct{ w io.Writer }

func (d dropNewline) Write(p []byte) (int, error) {
	if _, err := d.w.Write(p[:len(p)-1]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// value writes v indented as if it sat at the depth prefix gives.
func (j *jsonWriter) value(v reflect.Value, prefix string) error {
	w := j.w
	if !v.IsValid() {
		_, err := w.WriteString("null")
		return err
	}
	// encoding/json stops a cycle after 1000 levels with an error; from
	// that deep on it is left to find one.
	if marshals(v.Type()) || len(prefix) > 500*len(jsonIndent) {
		return j.leaf(v, prefix)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			_, err := w.WriteString("null")
			return err
		}
		return j.value(v.Elem(), prefix)
	case reflect.Slice:
		if v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 { // null, or base64
			return j.leaf(v, prefix)
		}
		return j.array(v, prefix)
	case reflect.Array:
		return j.array(v, prefix)
	case reflect.Struct:
		if fields, ok := plainFields(v.Type()); ok {
			return j.object(v, fields, prefix)
		}
	}
	return j.leaf(v, prefix)
}

func (j *jsonWriter) array(v reflect.Value, prefix string) error {
	w := j.w
	if v.Len() == 0 {
		_, err := w.WriteString("[]")
		return err
	}
	inner := prefix + jsonIndent
	w.WriteByte('[')
	for i := range v.Len() {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteByte('\n')
		w.WriteString(inner)
		if err := j.value(v.Index(i), inner); err != nil {
			return err
		}
	}
	w.WriteByte('\n')
	w.WriteString(prefix)
	_, err := w.WriteString("]")
	return err
}

func (j *jsonWriter) object(v reflect.Value, fields []jsonField, prefix string) error {
	w := j.w
	inner := prefix + jsonIndent
	n := 0
	for _, f := range fields {
		fv := v.Field(f.index)
		if f.omitEmpty && emptyValue(fv) {
			continue
		}
		if n == 0 {
			w.WriteByte('{')
		} else {
			w.WriteByte(',')
		}
		n++
		w.WriteByte('\n')
		w.WriteString(inner)
		w.WriteString(f.key)
		w.WriteString(": ")
		if err := j.value(fv, inner); err != nil {
			return err
		}
	}
	if n == 0 {
		_, err := w.WriteString("{}")
		return err
	}
	w.WriteByte('\n')
	w.WriteString(prefix)
	_, err := w.WriteString("}")
	return err
}

// leaf writes what encoding/json makes of v. An addressable value is
// passed by address, as encoding/json does, so that MarshalJSON methods on
// pointer receivers apply to it as they would in the whole document.
func (j *jsonWriter) leaf(v reflect.Value, prefix string) error {
	// Only the value that is not addressable is boxed: boxing every leaf
	// (a string, an int64) was most of a large document's garbage.
	var x any
	if v.CanAddr() {
		x = v.Addr().Interface()
	} else {
		x = v.Interface()
	}
	j.enc.SetIndent(prefix, jsonIndent)
	return j.enc.Encode(x)
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// marshals reports whether encoding/json hands t (or *t) to a method of
// its own, which then writes the value.
func marshals(t reflect.Type) bool {
	for _, u := range []reflect.Type{t, reflect.PointerTo(t)} {
		if u.Implements(marshalerType) || u.Implements(textMarshalerType) {
			return true
		}
	}
	return false
}

// jsonField is a struct field as encoding/json writes it.
type jsonField struct {
	index     int
	key       string // the quoted name
	omitEmpty bool
}

// plainName is a field name that encoding/json writes as it stands.
var plainName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// structFields is what plainFields found of a struct type.
type structFields struct {
	fields []jsonField
	plain  bool
}

var structFieldsOf sync.Map // reflect.Type -> structFields

// plainFields returns the fields of struct type t in the order encoding/json
// writes them, and whether t is plain enough to walk: no embedded fields
// (whose promotion rules WriteJSON does not repeat), no tag options but
// omitempty, and distinct names that need no escaping. Any other struct is
// a leaf.
func plainFields(t reflect.Type) ([]jsonField, bool) {
	if f, ok := structFieldsOf.Load(t); ok {
		return f.(structFields).fields, f.(structFields).plain
	}
	sf := structFields{plain: true}
	seen := make(map[string]bool)
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			sf = structFields{}
			break
		}
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		if !plainName.MatchString(name) || (opts != "" && opts != "omitempty") || seen[name] {
			sf = structFields{}
			break
		}
		seen[name] = true
		sf.fields = append(sf.fields, jsonField{index: i, key: `"` + name + `"`, omitEmpty: opts == "omitempty"})
	}
	structFieldsOf.Store(t, sf)
	return sf.fields, sf.plain
}

// emptyValue is encoding/json's rule for omitempty.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

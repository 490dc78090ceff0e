package views

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dsfs/dsfs/vfile"
)

// indexFile is a model.safetensors.index.json of a view. A real checkpoint
// names ~100 k tensors, so the bytes are produced when the file is read,
// not kept for the life of the mount; only their length is computed here.
func indexFile(id string, total int64, weightMap map[string]string) *vfile.File {
	entries := make([]indexEntry, 0, len(weightMap))
	for n, f := range weightMap {
		entries = append(entries, indexEntry{n, f})
	}
	return indexOf(id, total, entries)
}

// indexEntry places a tensor in a file of a view's index.
type indexEntry struct{ tensor, file string }

// indexOf is indexFile of a weight map given as its entries in the order
// they were placed: of several entries of one name the last wins. The
// entries are sorted in place and kept; their strings are the tensors'
// and files' own.
func indexOf(id string, total int64, entries []indexEntry) *vfile.File {
	slices.SortStableFunc(entries, func(a, b indexEntry) int { return strings.Compare(a.tensor, b.tensor) })
	kept := entries[:0]
	for i, e := range entries {
		if i+1 < len(entries) && entries[i+1].tensor == e.tensor {
			continue
		}
		kept = append(kept, e)
	}
	entries = slices.Clip(kept)
	write := func(w *jsonWriter) {
		w.str("{\n  \"metadata\": {\n    \"total_size\": ")
		w.str(strconv.FormatInt(total, 10))
		w.str("\n  },\n  \"weight_map\": {")
		for i, e := range entries {
			if i > 0 {
				w.str(",")
			}
			w.str("\n    ")
			w.quote(e.tensor)
			w.str(": ")
			w.quote(e.file)
		}
		w.str("\n  }\n}\n")
	}
	var count jsonWriter
	write(&count)
	return vfile.NewFile(&vfile.Blocks{ID: id, N: int64(count.n), BlockLen: int64(count.n),
		Compute: func(_ context.Context, _ int64, dst []byte) error {
			w := jsonWriter{buf: dst[:0]}
			write(&w)
			return nil
		}})
}

// jsonWriter appends JSON text to buf, or only counts its length when buf
// is nil.
type jsonWriter struct {
	buf []byte
	n   int
}

func (w *jsonWriter) str(s string) {
	w.n += len(s)
	if w.buf != nil {
		w.buf = append(w.buf, s...)
	}
}

// quote writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced, everything else as is.
func (w *jsonWriter) quote(s string) {
	w.str(`"`)
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		w.str(s[start:i])
		switch {
		case c == '"' || c == '\\':
			w.str(`\` + string(c))
		case c < 0x20:
			w.str(`\u00` + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15]))
		default:
			w.str("\ufffd")
		}
		i++
		start = i
	}
	w.str(s[start:])
	w.str(`"`)
}

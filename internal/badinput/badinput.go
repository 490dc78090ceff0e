// Package badinput plants the bad inputs of FORMATS.md ("Bad input") in a
// copy of a v41-tiny checkpoint: each case damages one file the way a
// broken download or a hostile publisher would. The integration tests and
// the hostile-input bench (bench/hostile) share the cases.
package badinput

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GoodShard is a v41-tiny shard no case touches; BadShard is the one the
// shard cases damage.
const (
	GoodShard = "model-00003-of-00014.safetensors"
	BadShard  = "model-00004-of-00014.safetensors"
	// IndexName is the checkpoint's index file.
	IndexName = "model.safetensors.index.json"
)

// Case is one bad input.
type Case struct {
	Name   string
	File   string // the file the one problem line names
	Reason string // a phrase of the reason
	Plant  func(dir string) error
	// Bad says the bad shard cannot be opened as a shard: a loader of a
	// derived view fails on it (EIO, or ENOENT when it is missing).
	Bad bool
}

// Cases returns FORMATS.md's bad inputs, each planted in the v41-tiny
// checkpoint directory it is given.
func Cases() []Case {
	shard := func(dir string) string { return filepath.Join(dir, BadShard) }
	moveIndexEntry := func(to func(string) string) func(dir string) error {
		return func(dir string) error {
			return EditIndex(dir, func(m map[string]string) {
				for k, v := range m {
					if v == BadShard {
						m[k] = to(v)
						break
					}
				}
			})
		}
	}
	return []Case{
		{"header length beyond the file", BadShard, "past the end", func(dir string) error {
			return PatchBytes(shard(dir), 0, binary.LittleEndian.AppendUint64(nil, 90_000_000))
		}, true},
		{"header over 100 MB", BadShard, "limit", func(dir string) error {
			return PatchBytes(shard(dir), 0, binary.LittleEndian.AppendUint64(nil, 200_000_000))
		}, true},
		{"JSON that does not parse", BadShard, "JSON", func(dir string) error {
			return PatchBytes(shard(dir), 9, []byte("#"))
		}, true},
		{"unknown dtype", BadShard, "dtype", func(dir string) error {
			return RewriteHeader(shard(dir), func(h map[string]map[string]any) error {
				h[LastTensor(h)]["dtype"] = "Q7"
				return nil
			})
		}, true},
		{"shape does not match byte range", BadShard, "needs", func(dir string) error {
			return RewriteHeader(shard(dir), func(h map[string]map[string]any) error {
				sh := h[LastTensor(h)]["shape"].([]any)
				sh[0] = sh[0].(float64) + 1
				return nil
			})
		}, true},
		{"overlapping ranges", BadShard, "overlap", func(dir string) error {
			return RewriteHeader(shard(dir), func(h map[string]map[string]any) error {
				off := h[LastTensor(h)]["data_offsets"].([]any)
				off[0], off[1] = off[0].(float64)-8, off[1].(float64)-8
				return nil
			})
		}, true},
		{"gap between ranges", BadShard, "gap", func(dir string) error {
			return RewriteHeader(shard(dir), func(h map[string]map[string]any) error {
				off := h[LastTensor(h)]["data_offsets"].([]any)
				off[0], off[1] = off[0].(float64)+8, off[1].(float64)+8
				return nil
			})
		}, true},
		{"data past the end", BadShard, "past the end", func(dir string) error {
			fi, err := os.Stat(shard(dir))
			if err != nil {
				return err
			}
			return os.Truncate(shard(dir), fi.Size()-100)
		}, true},
		{"index entry outside the checkpoint", IndexName, "..", moveIndexEntry(func(v string) string { return "../" + v }), false},
		{"absolute index entry", IndexName, "absolute", moveIndexEntry(func(v string) string { return "/etc/" + v }), false},
		{"index entry naming config.json", IndexName, "to config.json, which is not a safetensors file", func(dir string) error {
			return EditIndex(dir, func(m map[string]string) { m["lm_head.extra"] = "config.json" })
		}, false},
		{"missing shard", BadShard, "missing", func(dir string) error {
			return os.Remove(shard(dir))
		}, true},
		{"scale shape not matching its weight", BadShard, "scale", func(dir string) error {
			return RewriteHeader(shard(dir), func(h map[string]map[string]any) error {
				for k, v := range h {
					if strings.Contains(k, ".experts.") && strings.HasSuffix(k, ".scale") {
						sh := v["shape"].([]any)
						sh[0], sh[1] = sh[0].(float64)/2, sh[1].(float64)*2
						return nil
					}
				}
				return errors.New("no expert scale in the shard")
			})
		}, false},
	}
}

// RewriteHeader rewrites a shard's header JSON with edit and keeps its
// data.
func RewriteHeader(path string, edit func(h map[string]map[string]any) error) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]map[string]any
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := edit(h); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return WriteShard(path, hj, b[8+n:])
}

// WriteShard writes a shard of the given header JSON and data.
func WriteShard(path string, header, data []byte) error {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(append(out, header...), data...)
	return os.WriteFile(path, out, 0o644)
}

// LastTensor returns the name of the tensor whose data ends the shard.
func LastTensor(h map[string]map[string]any) string {
	var name string
	var end float64 = -1
	for k, v := range h {
		if k == "__metadata__" {
			continue
		}
		if e := v["data_offsets"].([]any)[1].(float64); e > end {
			name, end = k, e
		}
	}
	return name
}

// PatchBytes overwrites the bytes of path at off with b.
func PatchBytes(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// EditIndex rewrites the weight map of dir's index with edit.
func EditIndex(dir string, edit func(map[string]string)) error {
	p := filepath.Join(dir, IndexName)
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var ix struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &ix); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	edit(ix.WeightMap)
	if b, err = json.Marshal(ix); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

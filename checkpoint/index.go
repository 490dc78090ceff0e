package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"
)

// index is a parsed model.safetensors.index.json.
type index struct {
	// weightMap maps each tensor to its shard (a cleaned, accepted entry),
	// or to "" when its entry was refused: the tensor is named, so finding
	// it in another shard is no second fault.
	weightMap map[string]string
	shards    []string       // the distinct accepted shards, sorted
	count     map[string]int // tensors per accepted shard
	problems  []Problem      // refused entries
}

// parseIndex parses an index. It fails when the index is unusable as a
// whole (not JSON, no weight_map); a bad entry is a problem and is dropped.
// A shard entry must be a relative, slash-separated path without ".."
// components: it is refused, never opened, otherwise.
func parseIndex(data []byte) (*index, error) {
	var doc struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("does not parse: %v", err)
	}
	weightMap, odd, err := decodeWeightMap(doc.WeightMap, MaxTensors)
	if err != nil {
		return nil, err
	}
	// The decoded map becomes the index's, each entry replaced by its
	// shard; decodeWeightMap left an odd value's entry "".
	idx := &index{weightMap: weightMap, count: make(map[string]int)}
	for name, v := range odd {
		idx.problems = append(idx.problems, Problem{File: IndexName, Tensor: name,
			Reason: fmt.Sprintf("weight_map value %s is not a file name", jsonText(v))})
	}
	refused := make(map[string]string) // entry -> reason
	// Clean once per distinct entry; there are thousands of tensors per shard.
	cleaned := make(map[string]string)
	for name, entry := range weightMap {
		if _, isOdd := odd[name]; isOdd {
			continue
		}
		if _, bad := refused[entry]; bad {
			idx.weightMap[name] = ""
			continue
		}
		shard, ok := cleaned[entry]
		if !ok {
			if err := checkEntry(entry); err != nil {
				refused[entry] = err.Error()
				idx.weightMap[name] = ""
				continue
			}
			shard = path.Clean(entry)
			cleaned[entry] = shard
		}
		idx.weightMap[name] = shard
		idx.count[shard]++
	}
	for shard := range idx.count {
		idx.shards = append(idx.shards, shard)
	}
	sort.Strings(idx.shards)
	for entry, reason := range refused {
		idx.problems = append(idx.problems, Problem{File: IndexName,
			Reason: fmt.Sprintf("shard entry %q %s; refused", entry, reason)})
	}
	sort.Slice(idx.problems, func(i, j int) bool {
		a, b := idx.problems[i], idx.problems[j]
		if a.Tensor != b.Tensor {
			return a.Tensor < b.Tensor
		}
		return a.Reason < b.Reason
	})
	return idx, nil
}

// decodeWeightMap decodes the weight_map object raw, refusing one of more
// than max members before decoding it: a decoded entry costs several times
// its JSON. A repeated name counts each time and keeps its last value.
// Values that are not strings are in odd (and in names, as ""). A real
// index has none: its values are decoded as strings, with no boxing.
func decodeWeightMap(raw json.RawMessage, max int) (names map[string]string, odd map[string]any, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, errors.New("has no weight_map object")
	}
	if members(raw) > max {
		return nil, nil, fmt.Errorf("weight_map has more than %d entries, the limit", max)
	}
	err = json.Unmarshal(raw, &names)
	// A value of another type fails the decode; a null one decodes as "".
	if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) || err == nil && hasEmpty(names) {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, nil, fmt.Errorf("does not parse: %v", err)
		}
		names, odd = make(map[string]string, len(m)), make(map[string]any)
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				odd[k] = v
			}
			names[k] = s
		}
		return names, odd, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("does not parse: %v", err)
	}
	return names, nil, nil
}

// hasEmpty reports whether a value of m is "".
func hasEmpty(m map[string]string) bool {
	for _, v := range m {
		if v == "" {
			return true
		}
	}
	return false
}

// members counts the members of the JSON object raw (its commas outside
// strings and nested values, plus one) without decoding it; for text that
// is not an object the count means nothing, and decoding will fail.
func members(raw []byte) int {
	n, depth, inString, empty := 0, 0, false, true
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
			if depth == 1 {
				empty = false
			}
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ',' && depth == 1:
			n++
		}
	}
	if empty {
		return 0
	}
	return n + 1
}

// checkEntry says why an index entry may not name a shard: only relative
// paths inside the checkpoint directory are opened. Symbolic links met on
// the way are followed later (the entry, not the target, is constrained).
func checkEntry(entry string) error {
	switch {
	case entry == "":
		return errors.New("is empty")
	case strings.ContainsRune(entry, 0):
		return errors.New("holds a NUL byte")
	case path.IsAbs(entry):
		return errors.New("is an absolute path")
	}
	for _, c := range strings.Split(entry, "/") {
		if c == ".." {
			return errors.New("has a .. component")
		}
	}
	if path.Clean(entry) == "." {
		return errors.New("names the checkpoint directory itself")
	}
	return nil
}

// jsonText renders a decoded JSON value for a message, shortened.
func jsonText(v any) string {
	b, _ := json.Marshal(v) // decoded JSON always re-encodes
	n := 40
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "..."
}

package vfile

import "encoding/json"

// JSON encodes v as every dsfs JSON document is written: indented by two
// spaces and ending in a newline.
func JSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
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

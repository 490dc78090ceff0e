package testdata

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// GGMLCase is one case of ggml's reference quantiser vectors
// (testdata/README.md), decoded.
type GGMLCase struct {
	Name, Kind, Type, Recipe string
	NPerRow, NRows           int
	Input                    []float32 // NRows x NPerRow
	Expect                   []byte    // ggml's quantised bytes
	Dequant                  []float32 // ggml's to_float of Expect
}

// GGML reads the cases of one vector file (e.g. "q2_k_ref.json.gz") and
// checks that it holds some, each of type typ.
func GGML(tb testing.TB, file, typ string) []GGMLCase {
	tb.Helper()
	var raw []struct {
		Name    string `json:"name"`
		Kind    string `json:"kind"`
		Type    string `json:"type"`
		Recipe  string `json:"recipe"`
		NPerRow int    `json:"n_per_row"`
		NRows   int    `json:"nrows"`
		Input   string `json:"input_f32_b64"`
		Expect  string `json:"expected_b64"`
		Dequant string `json:"dequant_f32_b64"`
	}
	GzipJSON(tb, filepath.Join("ggml", file), &raw)
	if len(raw) == 0 {
		tb.Fatalf("%s: no cases", file)
	}
	cases := make([]GGMLCase, len(raw))
	for i, r := range raw {
		if r.Type != typ {
			tb.Fatalf("%s: case %s has type %q, want %q", file, r.Name, r.Type, typ)
		}
		c := GGMLCase{Name: r.Name, Kind: r.Kind, Type: r.Type, Recipe: r.Recipe, NPerRow: r.NPerRow, NRows: r.NRows,
			Input: Float32s(tb, r.Input), Expect: Base64(tb, r.Expect), Dequant: Float32s(tb, r.Dequant)}
		if n := r.NPerRow * r.NRows; len(c.Input) != n || len(c.Dequant) != n {
			tb.Fatalf("%s: case %s: %d inputs and %d dequant values for %dx%d weights",
				file, r.Name, len(c.Input), len(c.Dequant), r.NRows, r.NPerRow)
		}
		cases[i] = c
	}
	return cases
}

// GzipJSON decodes the gzip-compressed JSON file at rel (relative to
// testdata/) into v.
func GzipJSON(tb testing.TB, rel string, v any) {
	tb.Helper()
	path := filepath.Join(Dir(tb), rel)
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

// Base64 decodes standard base64.
func Base64(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Float32s decodes base64 of little-endian float32 values.
func Float32s(tb testing.TB, s string) []float32 {
	tb.Helper()
	b := Base64(tb, s)
	if len(b)%4 != 0 {
		tb.Fatalf("%d bytes is not a float32 array", len(b))
	}
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

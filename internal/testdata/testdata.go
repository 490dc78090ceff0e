// Package testdata locates the reference vectors of the repository's
// testdata/ directory (see testdata/README.md) for tests, wherever the
// checkout lives.
package testdata

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of testdata/ at the module root, found by
// walking up from the working directory to go.mod. The test fails if it is
// missing: the vectors are part of the project's contract, never optional.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			td := filepath.Join(dir, "testdata")
			if _, err := os.Stat(td); err != nil {
				t.Fatalf("reference vectors not found at %s: %v", td, err)
			}
			return td
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("module root (go.mod) not found above the working directory")
		}
		dir = parent
	}
}

// TraceGolden reads the golden.json of a reference checkpoint of
// testdata/trace (e.g. "v4-tiny") into v and returns the checkpoint's
// directory.
func TraceGolden(tb testing.TB, name string, v any) (dir string) {
	tb.Helper()
	dir = filepath.Join(Dir(tb), "trace", name)
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		tb.Fatalf("%s: %v", dir, err)
	}
	return dir
}

// TraceSequences returns the directory of a reference checkpoint of
// testdata/trace (e.g. "v2lite-tiny") and the token ids of its golden
// sequences.
func TraceSequences(tb testing.TB, name string) (dir string, seqs [][]int) {
	tb.Helper()
	var g struct {
		Sequences []struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"sequences"`
	}
	dir = TraceGolden(tb, name, &g)
	for _, s := range g.Sequences {
		seqs = append(seqs, s.TokenIDs)
	}
	return dir, seqs
}

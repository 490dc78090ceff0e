// Package testdata locates the shared reference vectors (../shared/testdata
// beside the repository root) for tests, wherever the checkout lives.
package testdata

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of shared/testdata, found by walking up from
// the working directory to the module root. The test fails if it is missing:
// the vectors are part of the project's contract, never optional.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			td := filepath.Join(dir, "..", "shared", "testdata")
			if _, err := os.Stat(td); err != nil {
				t.Fatalf("shared test vectors not found at %s: %v", td, err)
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

// TraceSequences returns the directory of a reference checkpoint of
// shared/testdata/trace (e.g. "v2lite-tiny") and the token ids of its
// golden sequences.
func TraceSequences(tb testing.TB, name string) (dir string, seqs [][]int) {
	tb.Helper()
	dir = filepath.Join(Dir(tb), "trace", name)
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var g struct {
		Sequences []struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"sequences"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		tb.Fatalf("%s: %v", dir, err)
	}
	for _, s := range g.Sequences {
		seqs = append(seqs, s.TokenIDs)
	}
	return dir, seqs
}

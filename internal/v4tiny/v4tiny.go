// Package v4tiny opens the tiny DeepSeek-V4 and V4.1 reference
// checkpoints of testdata/trace (v4-tiny, v41-tiny) as trace/v4 models,
// for the tests of the packages that run them.
package v4tiny

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/v4"
)

// Open opens the V4 checkpoint in dir with its inference/config.json; its
// catalog closes when tb ends.
func Open(tb testing.TB, dir string) *v4.Model {
	tb.Helper()
	cat, inf := open(tb, dir)
	m, err := v4.Open(cat, inf)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Open41 opens the V4.1 checkpoint in dir with its inference/config.json
// and tokenizer.json; its catalog closes when tb ends.
func Open41(tb testing.TB, dir string) *v4.Model41 {
	tb.Helper()
	cat, inf := open(tb, dir)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := v4.Open41(cat, inf, tok)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func open(tb testing.TB, dir string) (*checkpoint.Catalog, []byte) {
	tb.Helper()
	cat, err := checkpoint.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cat.Close() })
	inf, err := os.ReadFile(filepath.Join(dir, "inference", "config.json"))
	if err != nil {
		tb.Fatal(err)
	}
	return cat, inf
}

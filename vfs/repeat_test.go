package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestRepeatLog: 2,345 failures of one file with one cause, each wrapped
// with its own offset, give 4 lines (the 1st, 10th, 100th and 1,000th);
// another file or another cause starts its own count.
func TestRepeatLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var r repeatLog
	for i := range 2345 {
		r.error(log, "read failed", "a", fmt.Errorf("reading a at %d: %w", i*4096, syscall.EIO), "offset", i*4096)
	}
	r.error(log, "read failed", "b", fmt.Errorf("reading b: %w", syscall.EIO))
	r.error(log, "read failed", "a", errors.New("other"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"file=a err=\"reading a at 0:", "times=10 ", "times=100 ", "times=1000 ", "file=b ", "err=other"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s, want %q", i, lines[i], w)
		}
	}
}

// TestRepeatLogBound: causes that differ every time are counted by file
// once maxRepeatKeys pairs are known, so the counts stay bounded.
func TestRepeatLogBound(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var r repeatLog
	for i := range maxRepeatKeys + 100 {
		r.error(log, "read failed", "a", fmt.Errorf("cause %d", i))
	}
	if len(r.counts) != maxRepeatKeys+1 {
		t.Errorf("%d keys, want %d", len(r.counts), maxRepeatKeys+1)
	}
	if n := strings.Count(buf.String(), "\n"); n != maxRepeatKeys+3 { // each new cause, then the 1st, 10th and 100th of the rest
		t.Errorf("%d lines, want %d", n, maxRepeatKeys+3)
	}
}

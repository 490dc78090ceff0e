package main

import (
	"io"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/trace/backend"
)

// TestDevice checks where --device sends every family's layers through
// the CLI's CUDA backend: the CPU for cpu; CUDA for cuda when it starts,
// else an error, since it was asked for; for auto, CUDA when it starts,
// else the CPU with one line saying why.
func TestDevice(t *testing.T) {
	if b, note, err := backend.Start("cpu", gpu); err != nil || note != "" || b.Name() != "cpu" {
		t.Errorf("cpu: %v, %q, %v", b, note, err)
	}
	reason := cuda.Available()
	for _, dev := range []string{"cuda", "auto"} {
		b, note, err := backend.Start(dev, gpu)
		if reason == nil {
			if err != nil || b.Name() != "cuda" || note != "" {
				t.Errorf("%s with a GPU: %v, %q, %v", dev, b, note, err)
			}
			if c, ok := b.(io.Closer); ok {
				c.Close()
			}
			continue
		}
		if dev == "cuda" {
			if err == nil || !strings.Contains(err.Error(), reason.Error()) {
				t.Errorf("cuda without a GPU: %v, want an error saying %q", err, reason)
			}
			continue
		}
		want := "trace/ runs layers on the CPU: cuda: " + reason.Error()
		if err != nil || b.Name() != "cpu" || note != want || strings.Contains(note, "\n") {
			t.Errorf("auto without a GPU: %v, %q, %v; want the CPU and %q", b, note, err, want)
		}
	}
}

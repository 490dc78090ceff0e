package main

import (
	"io"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/cuda"
)

// TestTraceV4Backend checks where --device sends V4 layers: the host engine
// for cpu; for cuda and auto the CUDA backend when it starts, else the
// host with one line saying why; an error only for an unknown device.
func TestTraceV4Backend(t *testing.T) {
	if b, note, err := traceV4Backend("cpu"); b != nil || note != "" || err != nil {
		t.Errorf("cpu: %v, %q, %v; want the host engine", b, note, err)
	}
	if _, _, err := traceV4Backend("tpu"); err == nil || !strings.Contains(err.Error(), `unknown device "tpu"`) {
		t.Errorf("tpu: %v", err)
	}
	gpu := cuda.Available()
	for _, dev := range []string{"cuda", "auto"} {
		b, note, err := traceV4Backend(dev)
		if err != nil {
			t.Fatalf("%s: %v", dev, err)
		}
		if gpu == nil {
			if b == nil || b.Name() != "cuda" || note != "" {
				t.Errorf("%s with a GPU: backend %v, note %q", dev, b, note)
			}
			if c, ok := b.(io.Closer); ok {
				c.Close()
			}
			continue
		}
		want := "trace: DeepSeek-V4 layers run on the CPU: cuda: " + gpu.Error()
		if b != nil || note != want || strings.Contains(note, "\n") {
			t.Errorf("%s without a GPU: backend %v, note %q, want %q", dev, b, note, want)
		}
	}
}

// Package tinyckpt gives a test binary one synthetic checkpoint, written
// before its tests run and removed after.
package tinyckpt

import (
	"fmt"
	"os"
	"testing"

	"github.com/dsfs/dsfs/synth"
)

// Main writes the synth preset into a temporary directory, stores its path
// in *dir, runs the tests and exits with their status. Call it from
// TestMain; tests that change the checkpoint copy it first.
func Main(m *testing.M, preset string, dir *string) {
	d, err := os.MkdirTemp("", "dsfs-test-"+preset+"-")
	if err == nil {
		err = synth.Write(preset, d)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "writing %s: %v\n", preset, err)
		os.Exit(1)
	}
	*dir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSynthRefusesANonEmptyDirectory: `dsfs synth` into a directory that
// holds anything fails and leaves it alone, unless --force.
func TestSynthRefusesANonEmptyDirectory(t *testing.T) {
	needMount(t) // for the binary
	out := t.TempDir()
	keep := filepath.Join(out, "config.json")
	if err := os.WriteFile(keep, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := exec.Command(dsfsBin, "synth", "--preset", "v41-tiny", out).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "not empty") || !strings.Contains(string(msg), "--force") {
		t.Fatalf("synth into a non-empty directory: %v\n%s", err, msg)
	}
	if b, _ := os.ReadFile(keep); string(b) != "mine\n" {
		t.Fatalf("the refused synth changed config.json: %q", b)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Fatalf("the refused synth wrote %d entries", len(ents)-1)
	}
	run(t, dsfsBin, "synth", "--preset", "v41-tiny", filepath.Join(out, "new"))
	run(t, dsfsBin, "synth", "--force", "--preset", "v41-tiny", out)
	if b, _ := os.ReadFile(keep); string(b) == "mine\n" {
		t.Fatal("synth --force did not write config.json")
	}
}

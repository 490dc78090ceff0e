package warmmem

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTouch: a touch maps, writes and gives back what it was asked for,
// and one the address space cannot hold is an error, not a crash.
func TestTouch(t *testing.T) {
	for _, n := range []int64{1, 4096, 3 << 20} {
		if err := Touch(n); err != nil {
			t.Errorf("Touch(%d): %v", n, err)
		}
	}
	if err := Touch(1 << 62); err == nil {
		t.Error("Touch(2^62) succeeded")
	}
}

// TestHoldFreePages, on a stand-in for the kernel's setting: held while
// the benchmark runs and put back after; nothing done where there is no
// setting or it already holds.
func TestHoldFreePages(t *testing.T) {
	saved := minFreeMs
	t.Cleanup(func() { minFreeMs = saved })
	minFreeMs = filepath.Join(t.TempDir(), "min_free_ms")

	restore, note := HoldFreePages()
	if err := restore(); err != nil || !strings.Contains(note, "no page_reporting") {
		t.Errorf("without the setting: %q, restore %v", note, err)
	}

	if err := os.WriteFile(minFreeMs, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	restore, note = HoldFreePages()
	if b, _ := os.ReadFile(minFreeMs); string(b) != heldMs || !strings.Contains(note, "0 before") {
		t.Errorf("held: setting %q, note %q", b, note)
	}
	_, again := HoldFreePages()
	if !strings.Contains(again, "already") {
		t.Errorf("held twice: %q", again)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(minFreeMs); string(b) != "0" {
		t.Errorf("restored to %q, want 0", b)
	}
}

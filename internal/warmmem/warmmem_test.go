package warmmem

import "testing"

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

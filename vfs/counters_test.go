package vfs

import "testing"

func TestLargestRead(t *testing.T) {
	var c counters
	for _, n := range []int{128 << 10, 1 << 20, 4096} {
		c.read(n)
	}
	if got := c.largestRead.Load(); got != 1<<20 {
		t.Errorf("largest read %d, want 1 MiB", got)
	}
	if c.reads.Load() != 3 || c.bytes.Load() != 128<<10+1<<20+4096 {
		t.Errorf("%d reads, %d bytes", c.reads.Load(), c.bytes.Load())
	}
}

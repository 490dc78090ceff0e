package vfs

import "testing"

func TestLargestRead(t *testing.T) {
	var c counters
	for _, r := range []struct{ size, n int }{{128 << 10, 128 << 10}, {1 << 20, 4096}, {4096, 4096}} {
		c.read(r.size, r.n)
	}
	if got := c.largestRead.Load(); got != 1<<20 {
		t.Errorf("largest read %d, want the largest request, 1 MiB", got)
	}
	if c.reads.Load() != 3 || c.bytes.Load() != 128<<10+2*4096 {
		t.Errorf("%d reads, %d bytes", c.reads.Load(), c.bytes.Load())
	}
}

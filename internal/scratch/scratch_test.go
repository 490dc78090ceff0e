package scratch

import "testing"

func TestGetLendsWhatItIsAskedFor(t *testing.T) {
	for _, n := range []int64{0, 1, 4096, 3 << 20, 7} {
		p, b := Get(n)
		if int64(len(b)) != n || int64(cap(*p)) < n || (n > 0 && &b[0] != &(*p)[0]) {
			t.Fatalf("Get(%d): %d bytes of a buffer of %d", n, len(b), cap(*p))
		}
		for i := range b {
			b[i] = byte(i)
		}
		Put(p)
	}
}

func Example() {
	buf, b := Get(1 << 20)
	defer Put(buf)
	copy(b, "rows read from the source")
	// ... compute from b; keep nothing of it past Put.
}

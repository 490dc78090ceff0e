package blockcache

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPopulate maps fresh anonymous memory, which has no page yet, and
// checks that populate backs every whole page of a range starting and
// ending inside pages, and leaves the partial pages at its ends alone.
func TestPopulate(t *testing.T) {
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 64*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := unix.Madvise(m[:page], unix.MADV_POPULATE_WRITE); errors.Is(err, unix.EINVAL) {
		t.Skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)")
	}
	unix.Madvise(m[:page], unix.MADV_DONTNEED)
	if n := residentPages(t, m); n != 0 {
		t.Fatalf("%d pages resident before populate", n)
	}
	populate(m[page/2 : 60*page+page/2])
	vec := residency(t, m)
	for i, r := range vec {
		want := i >= 1 && i < 60
		if r&1 == 1 != want {
			t.Errorf("page %d: resident %v, want %v", i, r&1 == 1, want)
		}
	}
	for _, b := range m {
		if b != 0 {
			t.Fatal("populate changed the bytes")
		}
	}
	populate(m[:page]) // less than two pages: nothing to do, no panic
}

func residentPages(t *testing.T, m []byte) int {
	n := 0
	for _, r := range residency(t, m) {
		n += int(r & 1)
	}
	return n
}

func residency(t *testing.T, m []byte) []byte {
	vec := make([]byte, len(m)/os.Getpagesize())
	// x/sys/unix has no mincore wrapper.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	return vec
}

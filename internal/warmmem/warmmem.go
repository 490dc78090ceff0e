// Package warmmem readies a virtual machine's free memory for a timed
// read, so that the read's speed is the reader's and the server's, not the
// hypervisor's.
//
// On the virtual machines dsfs's benchmarks run on, a guest page that has
// stayed free for a while costs a host fault when next used (the VM has a
// virtio balloon, which hands free pages back to the host). A read that
// fills fresh pages, a first read through FUSE filling the page cache or an
// object's chunks written to the cache directory, pays those faults inside
// the copies it makes: a first read through FUSE cost the server 2 s of CPU
// per GB when its pages came cold, against 0.15 s when they came from
// memory freed just before, and a first read of an object through a mount
// ran at half the speed. Touch, called right before a timed read with the
// memory that read will fill, takes that cost out of the figure, for the
// read and for the baseline it is compared with alike.
package warmmem

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Touch touches n bytes of fresh anonymous memory, a byte per page, and
// gives them back: the next n bytes of pages the kernel hands out come
// from memory the host has backed just now.
func Touch(n int64) error {
	m, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("touching %d bytes of memory: %w", n, err)
	}
	for i := 0; i < len(m); i += os.Getpagesize() {
		m[i] = 1
	}
	return unix.Munmap(m)
}

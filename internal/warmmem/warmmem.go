// Package warmmem readies a virtual machine's free memory for a timed
// read, so that the read's speed is the reader's and the server's, not the
// hypervisor's.
//
// On the virtual machines dsfs's benchmarks run on, the guest hands free
// pages back to the host (virtio-balloon free page reporting), and a page
// handed back costs a host fault when next used. A read that fills fresh
// pages, a first read through FUSE filling the page cache or an object's
// chunks written to the cache directory, pays those faults inside the
// copies it makes: a first read through FUSE cost the server 2 s of CPU
// per GB when its pages came cold, against 0.15 s when they came from
// memory freed just before, and a first read of an object through a mount
// ran at half the speed. Touch, called right before a timed read with the
// memory that read will fill, takes that cost out of the figure, for the
// read and for the baseline it is compared with alike.
//
// The kernels of those machines report a free page as soon as it is free
// (page_reporting.min_free_ms is 0), so memory a Touch frees may be cold
// again before the read uses it, and which pass that hits is chance: in
// four fusebench runs of five passes, the largest CPU per GB of nvfp4/'s
// first read through dsfs was 1.3 to 2.7 times the smallest, and through
// memfs up to 2.3 times. HoldFreePages keeps freed pages while a benchmark
// runs; in two runs with it (a minute) those spreads were 1.3 and 1.5, and
// 1.3 and 1.8. It narrows the noise, it does not end it.
//
// A Touch warms the pages one read takes, but a pass takes more than its
// reads: the servers' own memory, the pages of a mount read by 8 readers at
// once. TouchFree warms all the free memory, at the start of each of
// fusebench's passes (a few seconds each once held, half a minute for the
// first on a cold machine): the one reader of the 8-reader measurement went
// from 1572-2856 MB/s in two runs without it to 3024-3830 in two with it.
// The first reads' spreads stayed as they were (dsfs 1.2-1.4, memfs 1.2-1.5
// without; 1.4-1.6 and 1.2 with).
package warmmem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

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
	page := os.Getpagesize()
	for i := 0; i < len(m); i += page {
		m[i] = 1
	}
	return unix.Munmap(m)
}

// freeMargin is the free memory TouchFree leaves untouched, so that it
// makes the kernel reclaim nothing.
const freeMargin = 512 << 20

// TouchFree touches, as Touch does, all the memory the kernel has free but
// freeMargin: with free pages held (HoldFreePages), whatever a pass of a
// benchmark then allocates, in whichever order the kernel hands it out,
// comes backed.
func TouchFree() error {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemFree:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(v, "%d kB", &kb); err != nil {
				return fmt.Errorf("/proc/meminfo: %q: %w", line, err)
			}
			if n := kb<<10 - freeMargin; n > 0 {
				return Touch(n)
			}
			return nil
		}
	}
	return errors.New("/proc/meminfo: no MemFree")
}

// minFreeMs is how long the kernel keeps a free page before it reports
// it to the host, on kernels that let it be set.
var minFreeMs = "/sys/module/page_reporting/parameters/min_free_ms"

// heldMs is what HoldFreePages sets: five minutes, the most the kernels
// of those machines accept, longer than a pass of any benchmark that
// touches memory before its reads.
const heldMs = "300000"

// HoldFreePages has the kernel keep free pages for five minutes before it
// reports them to the host, until restore is called, and says what it did
// in one line; restore's error says what it could not put back. Where the
// kernel has no such setting it does nothing; where it cannot be written
// (no root) it says so and does nothing; the benchmark runs either way.
func HoldFreePages() (restore func() error, note string) {
	nothing := func() error { return nil }
	old, err := os.ReadFile(minFreeMs)
	if errors.Is(err, fs.ErrNotExist) {
		return nothing, "free pages: no page_reporting.min_free_ms on this kernel"
	}
	if err != nil {
		return nothing, fmt.Sprintf("free pages: %v", err)
	}
	was := strings.TrimSpace(string(old))
	if was == heldMs {
		return nothing, "free pages: held for " + heldMs + " ms already"
	}
	if err := os.WriteFile(minFreeMs, []byte(heldMs), 0); err != nil {
		return nothing, fmt.Sprintf("free pages: reported to the host at once, not held: %v", err)
	}
	restore = func() error {
		if err := os.WriteFile(minFreeMs, []byte(was), 0); err != nil {
			return fmt.Errorf("putting page_reporting.min_free_ms back to %s: %w", was, err)
		}
		return nil
	}
	return restore, "free pages: held " + heldMs + " ms before reporting to the host while measuring (page_reporting.min_free_ms, " + was + " before)"
}

// Benchmark readies b's timed reads: it holds free pages until b ends and
// returns touch, which touches n bytes (see Touch) and is called right
// before each timed read.
func Benchmark(b *testing.B, n int64) (touch func()) {
	restore, note := HoldFreePages()
	b.Log(note)
	b.Cleanup(func() {
		if err := restore(); err != nil {
			b.Error(err)
		}
	})
	return func() {
		if err := Touch(n); err != nil {
			b.Fatal(err)
		}
	}
}

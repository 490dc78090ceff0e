package blockcache

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// populate asks the kernel to back b's whole pages with memory now, in one
// call, instead of page by page as the computation first writes them. A
// fresh block is hundreds of pages, and on a virtual machine each page
// fault costs microseconds: in five first reads of v41-bench's
// engram-fp4/ shard, each beside one without, the server's CPU per GB
// fell from a median 392 to 348 ms. It is only a hint: a kernel before
// 5.14 refuses it, and the pages fault in as before.
func populate(b []byte) {
	page := uintptr(os.Getpagesize())
	if uintptr(len(b)) < 2*page {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p+page-1)&^(page-1) - p
	hi := (p+uintptr(len(b)))&^(page-1) - p
	unix.Madvise(b[lo:hi], unix.MADV_POPULATE_WRITE)
}

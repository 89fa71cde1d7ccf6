package prefault

import (
	"syscall"
	"unsafe"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// Range maps the whole pages among the n bytes at p, writable, in one
// system call (madvise MADV_POPULATE_WRITE). On a kernel without it the
// call fails and the pages fault in at first write, as without it.
func Range(p unsafe.Pointer, n uintptr) {
	const page = 4096
	start := (uintptr(p) + page - 1) &^ (page - 1)
	end := (uintptr(p) + n) &^ (page - 1)
	if end <= start {
		return
	}
	syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPopulateWrite)
}

//go:build unix

package diagnose

import (
	"os"
	"syscall"
)

// mapFile maps a regular file read-only into memory, so that a large
// snapshot is decoded where the page cache holds it rather than copied
// onto the heap. unmap must be called once nothing refers to the data;
// the decoder's strings are views of it, and nothing in a Snapshot keeps
// one.
func mapFile(f *os.File, size int64) (data []byte, unmap func(), err error) {
	data, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { syscall.Munmap(data) }, nil //nolint:errcheck // nothing to do on failure
}

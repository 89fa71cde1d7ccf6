//go:build !linux

package prefault

import "unsafe"

// Range does nothing outside Linux: the pages fault in at first write.
func Range(p unsafe.Pointer, n uintptr) {}

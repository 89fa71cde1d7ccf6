package prefault

import (
	"testing"
	"unsafe"
)

// TestRangeKeepsContents maps ranges of every alignment, including ones
// shorter than a page, and checks that what was written stays.
func TestRangeKeepsContents(t *testing.T) {
	buf := make([]byte, 5*4096+123)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, c := range []struct{ off, n int }{{0, len(buf)}, {1, 100}, {4095, 4097}, {17, 3 * 4096}, {0, 0}} {
		Range(unsafe.Pointer(&buf[c.off]), uintptr(c.n))
	}
	for i := range buf {
		if got, want := buf[i], byte(i*7); got != want {
			t.Fatalf("buf[%d] = %d after Range, want %d", i, got, want)
		}
	}
	fresh := new([64 << 10]byte)
	Range(unsafe.Pointer(fresh), unsafe.Sizeof(*fresh))
	for i, b := range fresh {
		if b != 0 {
			t.Fatalf("fresh[%d] = %d after Range, want 0", i, b)
		}
	}
}

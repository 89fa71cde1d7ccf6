package alloc

import (
	"path/filepath"
	"testing"
)

// TestContextRoom replays the probe bench/torch/addr/va_libs.py ran on an
// H200 (bench/results/2026-11-28-h200-va-libs/): a fixed sequence of new
// segments, a library's first kernels after the second. Without a
// library, and around random initialisation (no library), the address
// model places every segment where the driver did. Around cuDNN's first
// convolution it orders them as the driver did only with the context
// chunk's room opened there (LibraryLoaded; the segments carved from the
// room at the driver's addresses, the later ones offset by a chunk the
// library maps below them, which changes no order), and misorders them
// without it. Around cuBLAS's first product the same holds with the room
// opened from 64 MiB (its workspace the first segment carved there), and
// not with cuDNN's.
func TestContextRoom(t *testing.T) {
	for _, c := range []struct {
		file    string
		open    Library // the library whose first kernels run at the event (-1: none)
		exact   bool    // every address the driver's
		ordered bool    // every pair of segments in the driver's order
	}{
		{"none", -1, true, true},
		{"randn", -1, true, true},
		{"conv", CuDNN, false, true},
		{"conv", -1, false, false},
		{"matmul", CuBLAS, false, true},
		{"matmul", CuDNN, false, false},
		{"matmul", -1, false, false},
	} {
		ev := readEvents(t, filepath.Join("testdata", "va-libs", c.file+".json.gz"))
		var v vaSpace
		v.reset()
		var shift int64
		n, exact := 0, true
		var model, real []int64
		for _, e := range ev {
			if e[0] != "segment_alloc" {
				continue
			}
			if n == 3 && c.open >= 0 {
				v.openRoom(c.open) // the event, after its output took the 2 MiB piece
			}
			addr, size := int64(e[1].(float64)), int64(e[2].(float64))
			m, _ := v.alloc(size)
			if n == 0 {
				shift = addr - m
			}
			exact = exact && m+shift == addr
			model, real = append(model, m), append(real, addr)
			n++
		}
		if n < 40 {
			t.Fatalf("%s: %d segments, want the probe's 43 or more", c.file, n)
		}
		out := pairsOutOfOrder(model, real)
		if c.exact && !exact {
			t.Errorf("%s: an address other than the driver's", c.file)
		}
		if (out == 0) != c.ordered {
			t.Errorf("%s, library %d: %d pairs of segments out of order, want none: %v", c.file, c.open, out, c.ordered)
		}
		if testing.Verbose() {
			t.Logf("%s, library %d: %d pairs out of order, every address the driver's: %v", c.file, c.open, out, exact)
		}
	}
}

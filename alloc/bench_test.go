package alloc

import (
	"fmt"
	"testing"
)

// BenchmarkMallocFree measures one Malloc and one Free with n blocks
// cached: the cost should stay nearly flat as n grows (alloc/tree.go); random
// sizes make nearly every size distinct, the worst case for the buckets.
func BenchmarkMallocFree(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("cached=%d", n), func(b *testing.B) {
			a := New(Default())
			sizes := make([]int64, 2*n)
			x := uint32(1)
			for i := range sizes {
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				sizes[i] = int64(x%(8<<20)) + 1
			}
			held := make([]Block, len(sizes))
			for i, s := range sizes {
				held[i] = a.Malloc(s, 0)
			}
			for i := 0; i < len(held); i += 2 {
				a.Free(held[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a.Free(a.Malloc(sizes[i%len(sizes)], 0))
			}
		})
	}
}

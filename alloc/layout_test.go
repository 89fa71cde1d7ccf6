package alloc

import (
	"fmt"
	"testing"
)

// TestAppendLayout checks that the layout tells states apart as the
// allocator's future calls do: the same calls give the same layout, a block
// freed or allocated elsewhere gives another, and labels of allocated
// blocks are part of it.
func TestAppendLayout(t *testing.T) {
	label := func(Block) int64 { return 7 }
	run := func(sizes []int64, free int) (*Allocator, []Block) {
		a := New(Default())
		var bs []Block
		for _, n := range sizes {
			bs = append(bs, a.Malloc(n, 0))
		}
		if free >= 0 {
			a.Free(bs[free])
		}
		return a, bs
	}
	a, _ := run([]int64{1 << 20, 3 << 20, 512}, 1)
	b, _ := run([]int64{1 << 20, 3 << 20, 512}, 1)
	c, _ := run([]int64{1 << 20, 3 << 20, 512}, 0)
	d, _ := run([]int64{1 << 20, 3 << 20, 512}, -1)
	la, lb := fmt.Sprint(a.AppendLayout(nil, label)), fmt.Sprint(b.AppendLayout(nil, label))
	if la != lb {
		t.Errorf("the same calls give layouts %s and %s", la, lb)
	}
	for name, o := range map[string]*Allocator{"another block freed": c, "none freed": d} {
		if lo := fmt.Sprint(o.AppendLayout(nil, label)); lo == la {
			t.Errorf("%s: layout %s, want it to differ from %s", name, lo, la)
		}
	}
	other := fmt.Sprint(a.AppendLayout(nil, func(Block) int64 { return 8 }))
	if other == la {
		t.Errorf("the labels of allocated blocks are not in the layout")
	}
}

package alloc

// The free blocks of each pool are kept in a treap over the block slab:
// nodes are block indices (int32), keys are the block's (stream, size,
// segment order, offset), the order of PyTorch's BlockComparatorSize with
// the segment's order standing in for the device address
// (docs/allocator.md §3). Every operation is O(log n) with no heap
// allocation and no pointers for the garbage collector to scan.

// less orders two blocks as the free pools do.
func (a *Allocator) less(i, j int32) bool {
	x, y := &a.blocks[i], &a.blocks[j]
	if x.stream != y.stream {
		return x.stream < y.stream
	}
	if x.size != y.size {
		return x.size < y.size
	}
	if x.order != y.order {
		return x.order < y.order
	}
	return x.off < y.off
}

// split cuts tree t into the nodes ordered before key k and the rest.
func (a *Allocator) split(t, k int32) (l, r int32) {
	if t == 0 {
		return 0, 0
	}
	if a.less(t, k) {
		a.blocks[t].right, r = a.split(a.blocks[t].right, k)
		return t, r
	}
	l, a.blocks[t].left = a.split(a.blocks[t].left, k)
	return l, t
}

// merge joins trees l and r where every key of l is below every key of r.
func (a *Allocator) merge(l, r int32) int32 {
	if l == 0 {
		return r
	}
	if r == 0 {
		return l
	}
	if a.blocks[l].prio > a.blocks[r].prio {
		a.blocks[l].right = a.merge(a.blocks[l].right, r)
		return l
	}
	a.blocks[r].left = a.merge(l, a.blocks[r].left)
	return r
}

func (a *Allocator) rand() uint32 {
	// xorshift32: deterministic, so every run builds the same trees.
	x := a.seed
	x ^= x << 13
	x ^= x >> 17
	x ^= x << 5
	a.seed = x
	return x
}

// treeInsert adds b: down the tree while the nodes have a higher
// priority, then b takes that place with the rest split under it.
func (a *Allocator) treeInsert(root *int32, b int32) {
	bl := &a.blocks[b]
	bl.prio = a.rand()
	link := root
	for *link != 0 && a.blocks[*link].prio > bl.prio {
		if a.less(b, *link) {
			link = &a.blocks[*link].left
		} else {
			link = &a.blocks[*link].right
		}
	}
	bl.left, bl.right = a.split(*link, b)
	*link = b
}

// treeRemove takes b out: its children merge in its place.
func (a *Allocator) treeRemove(root *int32, b int32) {
	link := root
	for *link != b {
		if a.less(b, *link) {
			link = &a.blocks[*link].left
		} else {
			link = &a.blocks[*link].right
		}
	}
	*link = a.merge(a.blocks[b].left, a.blocks[b].right)
}

// lowerBound returns the first free block of the tree on stream s of at
// least size bytes, or 0.
func (a *Allocator) lowerBound(t int32, s Stream, size int64) int32 {
	var best int32
	for t != 0 {
		x := &a.blocks[t]
		if x.stream > s || (x.stream == s && x.size >= size) {
			best, t = t, x.left
		} else {
			t = x.right
		}
	}
	return best
}

// walk calls f for every block of the tree in order, while f returns true.
func (a *Allocator) walk(t int32, f func(int32) bool) bool {
	if t == 0 {
		return true
	}
	return a.walk(a.blocks[t].left, f) && f(t) && a.walk(a.blocks[t].right, f)
}

// lastOn returns the last block of the tree on stream s (the largest),
// or 0.
func (a *Allocator) lastOn(t int32, s Stream) int32 {
	var best int32
	for t != 0 {
		x := &a.blocks[t]
		if x.stream <= s {
			if x.stream == s {
				best = t
			}
			t = x.right
		} else {
			t = x.left
		}
	}
	return best
}

// successor returns the block that follows b in the tree's order, or 0.
func (a *Allocator) successor(t, b int32) int32 {
	var best int32
	for t != 0 {
		if a.less(b, t) {
			best, t = t, a.blocks[t].left
		} else {
			t = a.blocks[t].right
		}
	}
	return best
}

// isTail reports whether free block b ends an expandable segment.
func (a *Allocator) isTail(b int32) bool {
	x := &a.blocks[b]
	return x.next == 0 && a.segs[x.seg].expandable
}

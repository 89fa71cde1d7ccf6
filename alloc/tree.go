package alloc

import "slices"

// The free blocks of each pool are ordered as PyTorch's
// BlockComparatorSize orders them: stream, size, then address, with the
// segment's order standing in for the address (then the offset in the
// segment; docs/allocator.md §3). They are kept in two levels:
//
//   - a bucket per (stream, size) with at least one free block, the
//     buckets of a pool in a treap ordered by (stream, size);
//   - in each bucket, a binary min-heap of its blocks ordered by
//     (segment order, offset), each entry a copy of its block's key so that
//     the heap is one contiguous array.
//
// A simulation has few distinct sizes and many blocks of each (a mixture of
// experts caches tens of thousands of equal remainders), so the treap is
// small and a lookup is a short descent plus the root of a heap.
//
// A bucket that empties stays in its treap, to be filled again without
// treap operations (a malloc that splits a block and the free that merges
// it back empty and refill the same few buckets); the lookups remove the
// empty buckets they meet, and when there are more than maxEmpty of them
// they are all removed. Every
// operation is O(log n) with no heap allocation once the slices have grown,
// and no pointers for the garbage collector to scan. The order is total
// (no two free blocks share a segment and offset), so the blocks handed out
// are those of any other structure keeping the same order.

// bucket is the free blocks of one (stream, size) in a pool.
type bucket struct {
	size        int64
	stream      Stream
	left, right int32 // treap children
	prio        uint32
	heap        []hent
}

// hent is a heap entry: a block and its (segment order, offset) key.
type hent struct {
	order, off int64
	b          int32
}

func (x hent) less(y hent) bool {
	if x.order != y.order {
		return x.order < y.order
	}
	return x.off < y.off
}

// bkLess orders buckets by (stream, size).
func bkLess(x *bucket, s Stream, size int64) bool {
	if x.stream != s {
		return x.stream < s
	}
	return x.size < size
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

// newBucket returns an empty bucket, reusing a spare one (and its heap's
// memory) when there is one.
func (a *Allocator) newBucket(s Stream, size int64) int32 {
	var k int32
	switch {
	case len(a.spareBk) > 0:
		k = a.spareBk[len(a.spareBk)-1]
		a.spareBk = a.spareBk[:len(a.spareBk)-1]
	case len(a.buckets) < cap(a.buckets):
		a.buckets = a.buckets[:len(a.buckets)+1]
		k = int32(len(a.buckets) - 1)
	default:
		a.buckets = append(a.buckets, bucket{})
		k = int32(len(a.buckets) - 1)
	}
	x := &a.buckets[k]
	*x = bucket{size: size, stream: s, prio: a.rand(), heap: x.heap[:0]}
	return k
}

// bucketFor returns the bucket of (s, size) in the treap at root, adding
// an empty one if there is none.
func (a *Allocator) bucketFor(root *int32, s Stream, size int64) int32 {
	for t := *root; t != 0; {
		x := &a.buckets[t]
		switch {
		case x.stream == s && x.size == size:
			return t
		case bkLess(x, s, size):
			t = x.right
		default:
			t = x.left
		}
	}
	k := a.newBucket(s, size)
	a.treeInsert(root, k)
	a.empty++ // until its first block
	return k
}

// dropEmpty takes empty bucket k out of the treap at root.
func (a *Allocator) dropEmpty(root *int32, k int32) {
	a.treeRemove(root, k)
	a.spareBk = append(a.spareBk, k)
	a.empty--
}

// purgeEmpty removes every empty bucket from both treaps.
func (a *Allocator) purgeEmpty() {
	for p := range a.roots {
		ks := a.purgeBuf[:0]
		a.eachBucket(a.roots[p], func(k int32) {
			if len(a.buckets[k].heap) == 0 {
				ks = append(ks, k)
			}
		})
		for _, k := range ks {
			a.dropEmpty(&a.roots[p], k)
		}
		a.purgeBuf = ks[:0]
	}
}

// eachBucket calls f for every bucket of the treap t, in order.
func (a *Allocator) eachBucket(t int32, f func(int32)) {
	if t == 0 {
		return
	}
	a.eachBucket(a.buckets[t].left, f)
	f(t)
	a.eachBucket(a.buckets[t].right, f)
}

// split cuts treap t into the buckets ordered before (s, size) and the rest.
func (a *Allocator) split(t int32, s Stream, size int64) (l, r int32) {
	if t == 0 {
		return 0, 0
	}
	if bkLess(&a.buckets[t], s, size) {
		a.buckets[t].right, r = a.split(a.buckets[t].right, s, size)
		return t, r
	}
	l, a.buckets[t].left = a.split(a.buckets[t].left, s, size)
	return l, t
}

// merge joins treaps l and r where every key of l is below every key of r.
func (a *Allocator) merge(l, r int32) int32 {
	if l == 0 {
		return r
	}
	if r == 0 {
		return l
	}
	if a.buckets[l].prio > a.buckets[r].prio {
		a.buckets[l].right = a.merge(a.buckets[l].right, r)
		return l
	}
	a.buckets[r].left = a.merge(l, a.buckets[r].left)
	return r
}

// treeInsert adds bucket k: down the treap while the nodes have a higher
// priority, then k takes that place with the rest split under it.
func (a *Allocator) treeInsert(root *int32, k int32) {
	x := &a.buckets[k]
	link := root
	for *link != 0 && a.buckets[*link].prio > x.prio {
		if bkLess(&a.buckets[*link], x.stream, x.size) {
			link = &a.buckets[*link].right
		} else {
			link = &a.buckets[*link].left
		}
	}
	x.left, x.right = a.split(*link, x.stream, x.size)
	*link = k
}

// treeRemove takes bucket k out: its children merge in its place.
func (a *Allocator) treeRemove(root *int32, k int32) {
	x := &a.buckets[k]
	link := root
	for *link != k {
		if bkLess(&a.buckets[*link], x.stream, x.size) {
			link = &a.buckets[*link].right
		} else {
			link = &a.buckets[*link].left
		}
	}
	*link = a.merge(x.left, x.right)
}

// pushBlock adds free block b to its bucket.
func (a *Allocator) pushBlock(root *int32, b int32) {
	x := &a.blocks[b]
	k := a.bucketFor(root, x.stream, x.size)
	bk := &a.buckets[k]
	x.bkt = k
	if len(bk.heap) == 0 {
		a.empty--
	}
	bk.heap = append(bk.heap, hent{order: x.order, off: x.off, b: b})
	a.siftUp(bk.heap, len(bk.heap)-1)
}

// maxEmpty bounds the empty buckets left in the treaps.
const maxEmpty = 1024

// popBlock takes free block b out of its bucket (an emptied bucket stays
// in the treap).
func (a *Allocator) popBlock(root *int32, b int32) {
	k := a.blocks[b].bkt
	bk := &a.buckets[k]
	h := bk.heap
	i, n := int(a.blocks[b].hpos), len(h)-1
	if i != n {
		h[i] = h[n]
		a.blocks[h[i].b].hpos = int32(i)
	}
	bk.heap = h[:n]
	if n == 0 {
		a.empty++
		if a.empty > maxEmpty {
			a.purgeEmpty()
		}
		return
	}
	if i != n {
		if i > 0 && h[i].less(h[(i-1)/2]) {
			a.siftUp(bk.heap, i)
		} else {
			a.siftDown(bk.heap, i)
		}
	}
}

func (a *Allocator) siftUp(h []hent, i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !e.less(h[p]) {
			break
		}
		h[i] = h[p]
		a.blocks[h[i].b].hpos = int32(i)
		i = p
	}
	h[i] = e
	a.blocks[e.b].hpos = int32(i)
}

func (a *Allocator) siftDown(h []hent, i int) {
	e, n := h[i], len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].less(h[c]) {
			c++
		}
		if !h[c].less(e) {
			break
		}
		h[i] = h[c]
		a.blocks[h[i].b].hpos = int32(i)
		i = c
	}
	h[i] = e
	a.blocks[e.b].hpos = int32(i)
}

// lowerBucket returns the first non-empty bucket of the treap at root at
// or after (s, size) in (stream, size) order, or 0; it removes the empty
// buckets it finds there.
func (a *Allocator) lowerBucket(root *int32, s Stream, size int64) int32 {
	for {
		var best int32
		for t := *root; t != 0; {
			x := &a.buckets[t]
			if bkLess(x, s, size) {
				t = x.right
			} else {
				best, t = t, x.left
			}
		}
		if best == 0 || len(a.buckets[best].heap) > 0 {
			return best
		}
		a.dropEmpty(root, best)
	}
}

// lowerBound returns the first free block of the pool (in the pools'
// order) with stream above s, or on stream s of at least size bytes; or 0.
func (a *Allocator) lowerBound(root *int32, s Stream, size int64) int32 {
	if k := a.lowerBucket(root, s, size); k != 0 {
		return a.buckets[k].heap[0].b
	}
	return 0
}

// successor returns the block that follows b in the pool's order, or 0.
// b must be the first block of its bucket (as lowerBound returns).
func (a *Allocator) successor(root *int32, b int32) int32 {
	x := &a.blocks[b]
	if h := a.buckets[x.bkt].heap; len(h) > 1 {
		c := 1
		if len(h) > 2 && h[2].less(h[1]) {
			c = 2
		}
		return h[c].b
	}
	return a.lowerBound(root, x.stream, x.size+1)
}

// lastBucket returns the last non-empty bucket of the treap at root on
// stream s, or 0; it removes the empty buckets it finds there.
func (a *Allocator) lastBucket(root *int32, s Stream) int32 {
	for {
		var best int32
		for t := *root; t != 0; {
			x := &a.buckets[t]
			if x.stream <= s {
				if x.stream == s {
					best = t
				}
				t = x.right
			} else {
				t = x.left
			}
		}
		if best == 0 || len(a.buckets[best].heap) > 0 {
			return best
		}
		a.dropEmpty(root, best)
	}
}

// lastOn returns the last block of the pool on stream s (the largest,
// and of those the last by segment order and offset), or 0.
func (a *Allocator) lastOn(root *int32, s Stream) int32 {
	k := a.lastBucket(root, s)
	if k == 0 {
		return 0
	}
	h := a.buckets[k].heap
	m := h[len(h)/2] // the last entry is a leaf; the largest is a leaf
	for _, e := range h[len(h)/2:] {
		if m.less(e) {
			m = e
		}
	}
	return m.b
}

// walk calls f for every block of the pool in order, while f returns
// true.
func (a *Allocator) walk(t int32, f func(int32) bool) bool {
	if t == 0 {
		return true
	}
	x := &a.buckets[t]
	if !a.walk(x.left, f) {
		return false
	}
	h := append(a.walkBuf[:0], x.heap...)
	slices.SortFunc(h, func(p, q hent) int {
		if p.less(q) {
			return -1
		}
		return 1
	})
	for _, e := range h {
		if !f(e.b) {
			return false
		}
	}
	a.walkBuf = h[:0]
	return a.walk(a.buckets[t].right, f)
}

// isTail reports whether free block b ends an expandable segment.
func (a *Allocator) isTail(b int32) bool {
	x := &a.blocks[b]
	return x.next == 0 && a.segs[x.seg].expandable
}

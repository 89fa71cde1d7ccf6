package alloc

import "slices"

// The free blocks of each pool are ordered as PyTorch's
// BlockComparatorSize orders them: stream, size, then address, with the
// segment's order standing in for the address (then the offset in the
// segment; docs/allocator.md §3). They are kept in two levels:
//
//   - a bucket per (stream, size), the buckets of a pool in a sorted array
//     of their (stream, size) keys;
//   - in each bucket, a binary min-heap of its blocks ordered by
//     (segment order, offset), each entry a copy of its block's key so that
//     the heap is one contiguous array.
//
// A simulation has few distinct sizes and many blocks of each (a mixture
// of experts caches tens of thousands of equal remainders; a 7B decoder's
// pools hold about 15 distinct sizes at a time), so a lookup is a binary
// search of a short array plus the root of a heap.
//
// A bucket that empties stays in the array, to be filled again without
// moving the array (a malloc that splits a block and the free that merges
// it back empty and refill the same few buckets); lookups step over empty
// buckets, and when there are more than maxEmpty of them they are all
// removed. A block costs O(log n) in the blocks of its size; a size not
// in the array costs a move of the array's tail. There is no heap
// allocation once the slices have grown, and no pointer for the garbage
// collector to scan. The order is total (no two free blocks share a
// segment and offset), so the blocks handed out are those of any other
// structure keeping the same order.

// bucket is the free blocks of one (stream, size) in a pool.
type bucket struct {
	size   int64
	stream Stream
	heap   []hent
}

// bkey is a bucket's place in its pool's sorted array.
type bkey struct {
	size   int64
	stream Stream
	k      int32
}

// before reports whether key x orders before (s, size).
func (x bkey) before(s Stream, size int64) bool {
	if x.stream != s {
		return x.stream < s
	}
	return x.size < size
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

// maxEmpty bounds the empty buckets kept in the arrays.
const maxEmpty = 256

// search returns the index of the first key of pool p at or after
// (s, size).
func (a *Allocator) search(p int, s Stream, size int64) int {
	ix := a.index[p]
	lo, hi := 0, len(ix)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ix[m].before(s, size) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
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
	*x = bucket{size: size, stream: s, heap: x.heap[:0]}
	return k
}

// bucketFor returns the bucket of (s, size) in pool p, adding an empty one
// if there is none.
func (a *Allocator) bucketFor(p int, s Stream, size int64) int32 {
	i := a.search(p, s, size)
	if ix := a.index[p]; i < len(ix) && ix[i].stream == s && ix[i].size == size {
		return ix[i].k
	}
	k := a.newBucket(s, size)
	a.index[p] = slices.Insert(a.index[p], i, bkey{size: size, stream: s, k: k})
	a.empty++ // until its first block
	return k
}

// purgeEmpty removes every empty bucket from the arrays.
func (a *Allocator) purgeEmpty() {
	for p := range a.index {
		kept := a.index[p][:0]
		for _, x := range a.index[p] {
			if len(a.buckets[x.k].heap) == 0 {
				a.spareBk = append(a.spareBk, x.k)
				continue
			}
			kept = append(kept, x)
		}
		a.index[p] = kept
	}
	a.empty = 0
}

// pushBlock adds free block b to its bucket.
func (a *Allocator) pushBlock(p int, b int32) {
	x := &a.blocks[b]
	k := a.bucketFor(p, x.stream, x.size)
	bk := &a.buckets[k]
	x.bkt = k
	if len(bk.heap) == 0 {
		a.empty--
	}
	bk.heap = append(bk.heap, hent{order: x.order, off: x.off, b: b})
	a.siftUp(bk.heap, len(bk.heap)-1)
}

// popBlock takes free block b out of its bucket (an emptied bucket stays
// in the array).
func (a *Allocator) popBlock(b int32) {
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

// lowerBucket returns the first non-empty bucket of pool p at or after
// (s, size) in (stream, size) order, or 0.
func (a *Allocator) lowerBucket(p int, s Stream, size int64) int32 {
	ix := a.index[p]
	for i := a.search(p, s, size); i < len(ix); i++ {
		if k := ix[i].k; len(a.buckets[k].heap) > 0 {
			return k
		}
	}
	return 0
}

// lowerBound returns the first free block of pool p (in the pools' order)
// with stream above s, or on stream s of at least size bytes; or 0.
func (a *Allocator) lowerBound(p int, s Stream, size int64) int32 {
	if k := a.lowerBucket(p, s, size); k != 0 {
		return a.buckets[k].heap[0].b
	}
	return 0
}

// successor returns the block that follows b in pool p's order, or 0.
// b must be the first block of its bucket (as lowerBound returns).
func (a *Allocator) successor(p int, b int32) int32 {
	x := &a.blocks[b]
	if h := a.buckets[x.bkt].heap; len(h) > 1 {
		c := 1
		if len(h) > 2 && h[2].less(h[1]) {
			c = 2
		}
		return h[c].b
	}
	return a.lowerBound(p, x.stream, x.size+1)
}

// lastBucket returns the last non-empty bucket of pool p on stream s, or 0.
func (a *Allocator) lastBucket(p int, s Stream) int32 {
	ix := a.index[p]
	for i := a.search(p, s+1, 0) - 1; i >= 0 && ix[i].stream == s; i-- {
		if k := ix[i].k; len(a.buckets[k].heap) > 0 {
			return k
		}
	}
	return 0
}

// lastOn returns the last block of pool p on stream s (the largest, and
// of those the last by segment order and offset), or 0.
func (a *Allocator) lastOn(p int, s Stream) int32 {
	k := a.lastBucket(p, s)
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

// walk calls f for every free block of pool p in order, while f returns
// true.
func (a *Allocator) walk(p int, f func(int32) bool) bool {
	for _, x := range a.index[p] {
		h := append(a.walkBuf[:0], a.buckets[x.k].heap...)
		a.walkBuf = h[:0]
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
	}
	return true
}

// isTail reports whether free block b ends an expandable segment.
func (a *Allocator) isTail(b int32) bool {
	x := &a.blocks[b]
	return x.next == 0 && a.segs[x.seg].expandable
}

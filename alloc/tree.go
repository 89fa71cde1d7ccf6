package alloc

import (
	"math/bits"
	"slices"
)

// The free blocks of each pool are ordered as PyTorch's
// BlockComparatorSize orders them: stream, size, then address, with the
// segment's order standing in for the address (then the offset in the
// segment; docs/allocator.md §3). They are kept in two levels:
//
//   - a bucket per (stream, size); each pool keeps, per stream, the sizes
//     of its buckets in a sorted array, with the buckets beside them and a
//     bit set of those that hold blocks;
//   - in each bucket, a binary min-heap of its blocks ordered by
//     (segment order, offset), each entry a copy of its block's key so that
//     the heap is one contiguous array.
//
// A simulation asks for few distinct sizes, again and again (a 7B
// decoder's pools hold about 15 at a time and see each layer's sizes in
// every layer), and has many blocks of some (a mixture of experts caches
// tens of thousands of equal remainders). A bucket that empties stays in
// its index, its bit cleared, so that the next block of its size finds it
// where it was: a lookup is a binary search of a short array of integers,
// a scan of the bit set for the first bucket with blocks, and the root of
// its heap; sizes enter the array only the first time they are seen. When
// empty buckets outnumber the others (and a few dozen), the index is
// compacted and they go to a spare list with their heaps' memory. A block
// costs O(log n) in the blocks of its size. There is no heap allocation
// once the slices have grown, and no pointer for the garbage collector to
// scan. The order is total (no two free blocks share a segment and
// offset), so the blocks handed out are those of any other structure
// keeping the same order; every caller of a lookup wants a block of the
// stream it names, so lookups stay on one stream.

// bucket is the free blocks of one (stream, size) in a pool.
type bucket struct {
	size   int64
	stream Stream
	pos    int32 // its place in its index
	pool   int32
	heap   []hent
}

// sizeIndex is one stream's buckets in a pool: their sizes in increasing
// order, the bucket of each, and which hold blocks.
type sizeIndex struct {
	sizes []int64
	ks    []int32
	live  []uint64 // bit i: bucket ks[i] holds blocks
	empty int      // buckets without blocks
	// memo remembers search's answers by size until a bucket enters or
	// leaves the index (gen counts those changes): a simulation asks for
	// the same few sizes over and over.
	gen  uint64
	memo [memoSlots]memoEnt
}

type memoEnt struct {
	size, gen int64
	pos       int
}

const memoSlots = 64

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

// on returns the index of pool p for stream s, or nil when the stream has
// none.
func (a *Allocator) on(p int, s Stream) *sizeIndex {
	if ix := a.index[p]; int(s) < len(ix) && s >= 0 {
		return &ix[s]
	}
	return nil
}

// search returns the position of the first size at or above size.
func (x *sizeIndex) search(size int64) int {
	m := &x.memo[uint64(size)*0x9E3779B97F4A7C15>>58]
	if m.size == size && m.gen == int64(x.gen) {
		return m.pos
	}
	sz := x.sizes
	lo, hi := 0, len(sz)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if sz[h] < size {
			lo = h + 1
		} else {
			hi = h
		}
	}
	*m = memoEnt{size: size, gen: int64(x.gen), pos: lo}
	return lo
}

// next returns the first position at or after i whose bucket holds
// blocks, or len(x.sizes).
func (x *sizeIndex) next(i int) int {
	w := i >> 6
	if w >= len(x.live) {
		return len(x.sizes)
	}
	if m := x.live[w] >> (uint(i) & 63); m != 0 {
		return i + bits.TrailingZeros64(m)
	}
	for w++; w < len(x.live); w++ {
		if m := x.live[w]; m != 0 {
			return w<<6 + bits.TrailingZeros64(m)
		}
	}
	return len(x.sizes)
}

// last returns the last position whose bucket holds blocks, or -1.
func (x *sizeIndex) last() int {
	for w := len(x.live) - 1; w >= 0; w-- {
		if m := x.live[w]; m != 0 {
			return w<<6 + 63 - bits.LeadingZeros64(m)
		}
	}
	return -1
}

func (x *sizeIndex) setLive(i int32)   { x.live[i>>6] |= 1 << (uint(i) & 63) }
func (x *sizeIndex) clearLive(i int32) { x.live[i>>6] &^= 1 << (uint(i) & 63) }

// newBucket returns an empty bucket, reusing a spare one (and its heap's
// memory) when there is one.
func (a *Allocator) newBucket(p int, s Stream, size int64) int32 {
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
	*x = bucket{size: size, stream: s, pool: int32(p), heap: x.heap[:0]}
	return k
}

// indexFor returns the index of pool p for stream s, adding it (and those
// of the streams below s) if there is none.
func (a *Allocator) indexFor(p int, s Stream) *sizeIndex {
	if ix := a.index[p]; int(s) < len(ix) {
		return &ix[s]
	}
	for int(s) >= len(a.index[p]) {
		a.index[p] = append(a.index[p], sizeIndex{})
	}
	return &a.index[p][s]
}

// insert puts empty bucket k at position i of index x, moving the buckets
// after it up by one.
func (a *Allocator) insert(x *sizeIndex, i int, k int32) {
	x.sizes = slices.Insert(x.sizes, i, a.buckets[k].size)
	x.ks = slices.Insert(x.ks, i, k)
	for j := i; j < len(x.ks); j++ {
		a.buckets[x.ks[j]].pos = int32(j)
	}
	if n := (len(x.sizes) + 63) >> 6; n > len(x.live) {
		x.live = append(x.live, 0)
	}
	// Shift the bits at i and above up by one; bit i (the new bucket) is
	// clear.
	w := i >> 6
	for j := len(x.live) - 1; j > w; j-- {
		x.live[j] = x.live[j]<<1 | x.live[j-1]>>63
	}
	low := uint64(1)<<(uint(i)&63) - 1
	x.live[w] = x.live[w]&low | (x.live[w]&^low)<<1
	x.empty++
	x.gen++
}

// compact takes the empty buckets out of index x, to the spare list.
func (a *Allocator) compact(x *sizeIndex) {
	n := 0
	for i, k := range x.ks {
		if len(a.buckets[k].heap) == 0 {
			a.spareBk = append(a.spareBk, k)
			continue
		}
		x.sizes[n], x.ks[n] = x.sizes[i], k
		a.buckets[k].pos = int32(n)
		n++
	}
	x.sizes, x.ks = x.sizes[:n], x.ks[:n]
	clear(x.live)
	for i := 0; i < n; i++ {
		x.live[i>>6] |= 1 << (uint(i) & 63)
	}
	x.live = x.live[:(n+63)>>6]
	x.empty = 0
	x.gen++
}

// compactAt is how many empty buckets an index keeps at most beyond the
// number that hold blocks.
const compactAt = 16

// pushBlock adds free block b to its bucket in pool p, adding an empty
// bucket to the index if its size has none.
func (a *Allocator) pushBlock(p int, b int32) {
	x := &a.blocks[b]
	ix := a.indexFor(p, x.stream)
	i := ix.search(x.size)
	var k int32
	if i < len(ix.sizes) && ix.sizes[i] == x.size {
		k = ix.ks[i]
	} else {
		k = a.newBucket(p, x.stream, x.size)
		a.insert(ix, i, k)
	}
	bk := &a.buckets[k]
	x.bkt = k
	if len(bk.heap) == 0 {
		ix.setLive(bk.pos)
		ix.empty--
	}
	bk.heap = append(bk.heap, hent{order: x.order, off: x.off, b: b})
	a.siftUp(bk.heap, len(bk.heap)-1)
}

// popBlock takes free block b out of its bucket.
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
		x := &a.index[bk.pool][bk.stream]
		x.clearLive(bk.pos)
		if x.empty++; x.empty > compactAt && x.empty > len(x.ks)-x.empty {
			a.compact(x)
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

// lowerBucket returns the first bucket of pool p on stream s of at least
// size bytes, or 0.
func (a *Allocator) lowerBucket(p int, s Stream, size int64) int32 {
	x := a.on(p, s)
	if x == nil {
		return 0
	}
	if i := x.next(x.search(size)); i < len(x.ks) {
		return x.ks[i]
	}
	return 0
}

// lowerBound returns the first free block of pool p (in the pools' order)
// on stream s of at least size bytes, or 0.
func (a *Allocator) lowerBound(p int, s Stream, size int64) int32 {
	if k := a.lowerBucket(p, s, size); k != 0 {
		return a.buckets[k].heap[0].b
	}
	return 0
}

// successor returns the block that follows b on its stream in pool p's
// order, or 0. b must be the first block of its bucket (as lowerBound
// returns).
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

// lastBucket returns the last bucket of pool p on stream s, or 0.
func (a *Allocator) lastBucket(p int, s Stream) int32 {
	if x := a.on(p, s); x != nil {
		if i := x.last(); i >= 0 {
			return x.ks[i]
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
	for i := range a.index[p] {
		for _, k := range a.index[p][i].ks {
			if len(a.buckets[k].heap) == 0 {
				continue
			}
			if !a.walkBucket(k, f) {
				return false
			}
		}
	}
	return true
}

// walkBucket calls f for the blocks of bucket k in order, while f returns
// true.
func (a *Allocator) walkBucket(k int32, f func(int32) bool) bool {
	h := append(a.walkBuf[:0], a.buckets[k].heap...)
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
	return true
}

// isTail reports whether free block b ends an expandable segment.
func (a *Allocator) isTail(b int32) bool {
	x := &a.blocks[b]
	return x.next == 0 && a.segs[x.seg].expandable
}

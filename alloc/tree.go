package alloc

import "slices"

// The free blocks of each pool are ordered as PyTorch's
// BlockComparatorSize orders them: stream, size, then address, with the
// segment's order standing in for the address (then the offset in the
// segment; docs/allocator.md §3). They are kept in two levels:
//
//   - a bucket per (stream, size); each pool keeps, per stream, its
//     non-empty buckets in an array sorted by size, each entry the
//     bucket's size and the bucket;
//   - in each bucket, a binary min-heap of its blocks ordered by
//     (segment order, offset), each entry a copy of its block's key so that
//     the heap is one contiguous array.
//
// A simulation has few distinct sizes and many blocks of each (a mixture
// of experts caches tens of thousands of equal remainders; a 7B decoder's
// pools hold about 12 distinct sizes and 100 free blocks at a time), so a
// lookup is a binary search of a short array plus the root of a heap. A
// bucket that empties leaves the array at once (a move of a few dozen
// bytes) and goes to a spare list with its heap's memory, and a new size
// enters it the same way, so a lookup never steps over empty buckets. A
// block costs O(log n) in the blocks of its size.
// There is no heap allocation once the slices have grown, and no pointer
// for the garbage collector to scan. The order is total (no two free
// blocks share a segment and offset), so the blocks handed out are those
// of any other structure keeping the same order; every caller of a lookup
// wants a block of the stream it names, so lookups stay on one stream.

// bucket is the free blocks of one (stream, size) in a pool.
type bucket struct {
	size   int64
	stream Stream
	pool   int32
	heap   []hent
}

// sizeIndex is one stream's non-empty buckets in a pool, in increasing
// order of size.
type sizeIndex struct {
	ents []sizeEnt
	// found is the place lowerBound last found: the entry a malloc then
	// takes its block from, which dropEntry would otherwise search for.
	found int
}

// sizeEnt is a size in a sizeIndex, beside its blocks so that a search
// reads one array: k > 0 is the bucket of the size's blocks; k < 0 is the
// size's one free block, −k, kept without a bucket (a split's remainder
// is often the only block of its size, and leaves soon).
type sizeEnt struct {
	size int64
	k    int32
}

// first returns the first free block of entry e.
func (a *Allocator) first(e sizeEnt) int32 {
	if e.k < 0 {
		return -e.k
	}
	return a.buckets[e.k].heap[0].b
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

// on returns the index of pool p for stream s, or nil when the stream has
// none. Stream 0's, which nearly every block is on, are fields of the
// allocator.
func (a *Allocator) on(p int, s Stream) *sizeIndex {
	if s == 0 {
		return &a.index[p&1]
	}
	if ix := a.side[p&1]; uint(s-1) < uint(len(ix)) {
		return &ix[s-1]
	}
	return nil
}

// indexes is how many streams have an index in pool p.
func (a *Allocator) indexes(p int) int { return 1 + len(a.side[p]) }

// search returns the position of the first size at or above size.
func (x *sizeIndex) search(size int64) int {
	e := x.ents
	lo, hi := 0, len(e)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if e[m].size < size {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

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
	x.size, x.stream, x.pool, x.heap = size, s, int32(p), x.heap[:0]
	return k
}

// indexOf returns pool p's index for stream s, adding it if there is
// none.
func (a *Allocator) indexOf(p int, s Stream) *sizeIndex {
	if s == 0 {
		return &a.index[p&1]
	}
	return a.sideIndex(p, s)
}

func (a *Allocator) sideIndex(p int, s Stream) *sizeIndex {
	if x := a.on(p, s); x != nil {
		return x
	}
	for int(s) > len(a.side[p]) {
		a.side[p] = append(a.side[p], sizeIndex{})
	}
	return &a.side[p][s-1]
}

// gapEnt is an entry whose one block has left (k 0, its size kept, so
// the array stays sorted): at most one at a time, at place at of pool
// p's index for stream s. A block of a new size cached next on the same
// index takes the gap, moving only the entries between the two places
// (a split's remainder or a merged block sorts near the block it came
// from); anything else closes it first (settle).
type gapEnt struct {
	open bool
	p    int
	s    Stream
	at   int
}

// settle takes the gap's entry out of its index, if there is a gap.
func (a *Allocator) settle() {
	if a.gap.open {
		a.closeGap()
	}
}

func (a *Allocator) closeGap() {
	g := a.gap
	x := a.on(g.p, g.s)
	x.ents = x.ents[:g.at+copy(x.ents[g.at:], x.ents[g.at+1:])]
	a.gap.open = false
}

// pushBlock adds free block b (record x) to pool p: alone in an entry
// when no other free block has its size (bkt 0, hpos the pool), else to
// the size's bucket, which the size's one block moves into first.
func (a *Allocator) pushBlock(p int, b int32, x *blockRec) {
	ix := a.indexOf(p, x.stream)
	if g := a.gap; g.open && g.p == p && g.s == x.stream && a.fitsGap(ix, g.at, x.size) {
		ix.ents[g.at] = sizeEnt{x.size, -b}
		x.bkt, x.hpos = 0, int32(p)
		a.gap.open = false
		return
	}
	i := ix.search(x.size)
	if i == len(ix.ents) || ix.ents[i].size != x.size {
		a.insertAlone(ix, p, i, b, x)
		return
	}
	k := ix.ents[i].k
	if k == 0 { // the gap, of this very size
		ix.ents[i].k = -b
		x.bkt, x.hpos = 0, int32(p)
		a.gap.open = false
		return
	}
	if k < 0 {
		o := -k
		k = a.newBucket(p, x.stream, x.size)
		ix.ents[i].k = k
		y := &a.blocks[o]
		y.bkt, y.hpos = k, 0
		bk := &a.buckets[k]
		bk.heap = append(bk.heap, hent{order: y.order, off: y.off, b: o})
	}
	bk := &a.buckets[k]
	x.bkt = k
	bk.heap = append(bk.heap, hent{order: x.order, off: x.off, b: b})
	a.siftUp(bk.heap, len(bk.heap)-1)
}

// fitsGap reports whether an entry of size belongs at place at of ix, the
// gap's: its neighbours there are below and above size, so no other entry
// has it. A split's remainder or a merged block usually does, and takes
// the gap without a search.
func (a *Allocator) fitsGap(ix *sizeIndex, at int, size int64) bool {
	e := ix.ents
	return (at == 0 || e[at-1].size < size) && (at+1 == len(e) || size < e[at+1].size)
}

// insertAlone adds an entry for free block b (record x), alone in its
// size, at place i of ix, pool p's index for its stream: into the gap when
// it is in ix, moving the entries between, else by moving those after i.
func (a *Allocator) insertAlone(ix *sizeIndex, p, i int, b int32, x *blockRec) {
	e := ix.ents
	if g := a.gap; g.open && g.p == p && g.s == x.stream {
		a.gap.open = false
		if g.at < i {
			i--
			copy(e[g.at:i], e[g.at+1:i+1])
		} else {
			copy(e[i+1:g.at+1], e[i:g.at])
		}
	} else {
		e = append(e, sizeEnt{})
		copy(e[i+1:], e[i:])
		ix.ents = e
	}
	e[i] = sizeEnt{x.size, -b}
	x.bkt, x.hpos = 0, int32(p)
}

// dropEntry takes the entry of size out of pool p's index for stream s:
// it becomes the gap, a gap left before closing first.
func (a *Allocator) dropEntry(p int, s Stream, size int64) {
	a.settle()
	x := a.on(p, s)
	i := x.found
	if i >= len(x.ents) || x.ents[i].size != size {
		i = x.search(size)
	}
	x.ents[i].k = 0
	a.gap = gapEnt{open: true, p: p, s: s, at: i}
}

// popBlock takes free block b (record x) out of its pool (a size left
// without blocks leaves the index; an emptied bucket goes to the spare
// list with its heap's memory).
func (a *Allocator) popBlock(b int32, x *blockRec) {
	k := x.bkt
	if k == 0 {
		a.dropEntry(int(x.hpos), x.stream, x.size)
		return
	}
	bk := &a.buckets[k]
	h := bk.heap
	i, n := int(x.hpos), len(h)-1
	if n == 0 {
		bk.heap = h[:0]
		a.dropEntry(int(bk.pool), bk.stream, bk.size)
		a.spareBk = append(a.spareBk, k)
		return
	}
	bk.heap = h[:n]
	if i == n {
		return
	}
	h[i] = h[n]
	a.blocks[h[i].b].hpos = int32(i)
	if i > 0 && h[i].less(h[(i-1)/2]) {
		a.siftUp(bk.heap, i)
	} else {
		a.siftDown(bk.heap, i)
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

// lowerBound returns the first free block of pool p (in the pools' order)
// on stream s of at least size bytes, or 0.
func (a *Allocator) lowerBound(p int, s Stream, size int64) int32 {
	a.settle()
	x := a.on(p, s)
	if x == nil {
		return 0
	}
	e, i := x.ents, x.found
	if i >= len(e) || e[i].size < size || i > 0 && e[i-1].size >= size {
		i = x.search(size)
	}
	if i < len(e) {
		x.found = i
		return a.first(e[i])
	}
	return 0
}

// successor returns the block that follows b on its stream in pool p's
// order, or 0. b must be the first block of its size (as lowerBound
// returns).
func (a *Allocator) successor(p int, b int32) int32 {
	x := &a.blocks[b]
	if x.bkt == 0 {
		return a.lowerBound(p, x.stream, x.size+1)
	}
	if h := a.buckets[x.bkt].heap; len(h) > 1 {
		c := 1
		if len(h) > 2 && h[2].less(h[1]) {
			c = 2
		}
		return h[c].b
	}
	return a.lowerBound(p, x.stream, x.size+1)
}

// lastSize returns the largest size of pool p's free blocks on stream s,
// or 0.
func (a *Allocator) lastSize(p int, s Stream) int64 {
	a.settle()
	if x := a.on(p, s); x != nil && len(x.ents) > 0 {
		return x.ents[len(x.ents)-1].size
	}
	return 0
}

// lastOn returns the last block of pool p on stream s (the largest, and
// of those the last by segment order and offset), or 0.
func (a *Allocator) lastOn(p int, s Stream) int32 {
	a.settle()
	x := a.on(p, s)
	if x == nil || len(x.ents) == 0 {
		return 0
	}
	k := x.ents[len(x.ents)-1].k
	if k < 0 {
		return -k
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
	a.settle()
	for i := range a.indexes(p) {
		for _, e := range a.on(p, Stream(i)).ents {
			if e.k < 0 && !f(-e.k) || e.k > 0 && !a.walkBucket(e.k, f) {
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

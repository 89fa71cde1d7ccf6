package alloc

import "math/bits"

// RoundSize is the block size a request of n bytes takes (round_size):
// a multiple of 512 B, or with roundup_power2_divisions set for n's
// interval, the next of d equal steps between two powers of two.
func (c Config) RoundSize(n int64) int64 { return c.round(n) }

// round is RoundSize without copying the configuration.
func (c *Config) round(n int64) int64 {
	if n < MinBlock {
		return MinBlock
	}
	if d := c.divisions(n); d > 1 && n > MinBlock*d {
		return nextDivision(n, d)
	}
	return (n + MinBlock - 1) / MinBlock * MinBlock
}

func (c *Config) divisions(n int64) int64 {
	i := bits.Len64(uint64(n)) - 1 - 20 // intervals start at 1 MiB
	i = max(0, min(i, roundupIntervals-1))
	return c.RoundupDivisions[i]
}

// nextDivision is roundup_power2_next_division.
func nextDivision(n, d int64) int64 {
	if isPow2(n) {
		return n
	}
	floor := int64(1) << (bits.Len64(uint64(n)) - 1)
	step := floor >> (bits.Len64(uint64(d)) - 1)
	if step == 0 {
		return floor << 1
	}
	r := n &^ (step - 1)
	if r == n {
		return n
	}
	return r + step
}

// AllocationSize is the segment cudaMalloc gets for a block of size bytes
// (get_allocation_size).
func (c Config) AllocationSize(size int64) int64 { return c.allocationSize(size) }

// allocationSize is AllocationSize without copying the configuration
// (a method on the value copies all of Config where it is inlined).
func (c *Config) allocationSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return c.largeSegment()
	}
	return (size + RoundLarge - 1) / RoundLarge * RoundLarge
}

// Malloc hands out a block for a request of n bytes on stream s.
func (a *Allocator) Malloc(n int64, s Stream) Block {
	a.init()
	if int32(s) >= a.streams {
		a.streams = int32(s) + 1
	}
	size := a.conf.round(n)
	small := size <= SmallSize
	p := poolOf(small)
	gc := a.limit > 0 && a.conf.GCThreshold > 0
	if gc {
		a.searches[p]++
	}
	b := a.freeBlock(p, s, size)
	if b != 0 {
		a.uncache(b)
	} else {
		b = a.newSegmentBlock(size, small, s, gc)
	}
	a.splitBlock(b, size, small)
	a.allocated += a.blocks[b].size
	if a.blocks[b].size >= a.conf.maxSplit() {
		a.oversizeAllocs++
	}
	if a.reserved > a.frag.Reserved {
		a.snapshot()
	}
	return Block(b)
}

// freeBlock is get_free_block: the smallest cached block on stream s of
// at least size bytes that max_split_size allows.
func (a *Allocator) freeBlock(p int, s Stream, size int64) int32 {
	b := a.lowerBound(p, s, size)
	if b == 0 || a.blocks[b].stream != s {
		return 0
	}
	if a.conf.ExpandableSegments && a.isTail(b) {
		// get_free_block ranks a block of an expandable segment by the
		// size it can grow to: the free block at the segment's end
		// borders the unmapped rest of the reservation, so any other
		// fitting block of the stream comes first.
		if n := a.successor(p, b); n != 0 && a.blocks[n].stream == s {
			b = n
		}
	}
	if p == 1 {
		ms, bs := a.conf.maxSplit(), a.blocks[b].size
		if size < ms && bs >= ms {
			return 0
		}
		if size >= ms && bs >= size+a.conf.nonSplit() {
			return 0
		}
	}
	return b
}

// newSegmentBlock gets fresh memory from the driver, through the
// out-of-memory path (release_available_cached_blocks, then
// release_cached_blocks and a counted retry) when the limit is in the way.
func (a *Allocator) newSegmentBlock(size int64, small bool, s Stream, gc bool) int32 {
	if gc {
		a.collect()
	}
	if b := a.grow(size, small, s, false); b != 0 {
		return b
	}
	if a.releaseOversize(size, small, s) {
		if b := a.grow(size, small, s, false); b != 0 {
			return b
		}
	}
	a.ReleaseCached()
	a.retries++
	if b := a.grow(size, small, s, false); b != 0 {
		return b
	}
	a.oom = true
	a.ooms++
	return a.grow(size, small, s, true)
}

// grow is alloc_block: a new segment, or more pages of the stream's
// expandable segment. Unless force is set it fails (returns 0) where the
// limit would be crossed.
func (a *Allocator) grow(size int64, small bool, s Stream, force bool) int32 {
	if a.conf.ExpandableSegments {
		return a.expand(size, small, s, force)
	}
	as := a.conf.allocationSize(size)
	if !force && a.limit > 0 && a.reserved+as > a.limit {
		return 0
	}
	order, chunk := a.segmentOrder(as)
	a.segs = append(a.segs, segRec{order: order, chunk: chunk, size: as, small: small, stream: s})
	g := int32(len(a.segs) - 1)
	b := a.newBlock()
	a.blocks[b] = blockRec{seg: g, size: as, stream: s}
	a.segs[g].last = b
	a.reserved += as
	if as >= a.conf.maxSplit() {
		a.oversizeSegs++
	}
	return b
}

// splitBlock is alloc_found_block's split: the rest of block b beyond
// size goes back to the pool when should_split says so.
func (a *Allocator) splitBlock(b int32, size int64, small bool) {
	x := &a.blocks[b]
	rem := x.size - size
	var split bool
	if small || a.conf.ExpandableSegments {
		split = rem >= MinBlock
	} else {
		split = size < a.conf.maxSplit() && rem > SmallSize
	}
	if !split {
		return
	}
	r := a.newBlock()
	x = &a.blocks[b]
	a.blocks[r] = blockRec{seg: x.seg, off: x.off + size, size: rem, prev: b, next: x.next, stream: x.stream}
	if x.next != 0 {
		a.blocks[x.next].prev = r
	} else {
		a.segs[x.seg].last = r
	}
	x.next, x.size = r, size
	a.cache(r)
}

// Free returns block b. A block used on another stream (RecordStream)
// leaves memory_allocated at once but is cached only at the next
// ProcessEvents, as PyTorch waits for the other stream's event.
func (a *Allocator) Free(b Block) {
	x := &a.blocks[b]
	a.allocated -= x.size
	if x.size >= a.conf.maxSplit() {
		a.oversizeAllocs--
	}
	if x.recorded {
		x.pending = true
		a.pending = append(a.pending, int32(b))
		return
	}
	a.release(int32(b))
}

// release is free_block: merge b with free neighbours and cache it.
func (a *Allocator) release(b int32) {
	x := &a.blocks[b]
	x.recorded, x.pending = false, false
	if n := x.next; n != 0 && a.blocks[n].free {
		a.uncache(n)
		a.coalesce(b, n)
	}
	if p := x.prev; p != 0 && a.blocks[p].free {
		a.uncache(p)
		a.coalesce(p, b)
		b = p
	}
	a.cache(b)
}

// coalesce joins block r, which follows l in their segment, into l.
func (a *Allocator) coalesce(l, r int32) {
	x, y := &a.blocks[l], &a.blocks[r]
	x.size += y.size
	x.next = y.next
	if y.next != 0 {
		a.blocks[y.next].prev = l
	} else {
		a.segs[x.seg].last = l
	}
	a.dropBlock(r)
}

// RecordStream marks block b as used on stream s too
// (Tensor.record_stream): when it is freed, its memory is reused only
// after ProcessEvents.
func (a *Allocator) RecordStream(b Block, s Stream) {
	if x := &a.blocks[b]; x.stream != s {
		x.recorded = true
	}
}

// ProcessEvents caches the blocks whose other-stream uses have ended
// (process_events): call it where the simulated program synchronises
// with the other stream.
func (a *Allocator) ProcessEvents() {
	for _, b := range a.pending {
		a.release(b)
	}
	a.pending = a.pending[:0]
}

// Pending returns the bytes freed but waiting for ProcessEvents.
func (a *Allocator) Pending() int64 {
	var n int64
	for _, b := range a.pending {
		n += a.blocks[b].size
	}
	return n
}

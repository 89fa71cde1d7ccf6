package alloc

// freeSegment returns the segment that free block b spans entirely to the
// driver (release_block).
func (a *Allocator) freeSegment(b int32) {
	a.uncache(b)
	x := &a.blocks[b]
	g := &a.segs[x.seg]
	a.reserved -= g.size
	g.released = true
	if a.modelsAddresses() {
		a.va.free(g.order, g.size, g.chunk)
	}
	if g.size >= a.conf.maxSplit() {
		a.oversizeSegs--
	}
	a.dropBlock(b)
}

func (a *Allocator) whole(b int32) bool {
	x := &a.blocks[b]
	return x.prev == 0 && x.next == 0 && !a.segs[x.seg].expandable
}

// ReleaseCached is release_cached_blocks (torch.cuda.empty_cache, and the
// out-of-memory path before its retry): pending frees are processed, every
// cached block that spans a whole segment is returned to the driver, and
// the free pages at the end of each expandable segment are unmapped.
func (a *Allocator) ReleaseCached() {
	a.ProcessEvents()
	for p := range a.index {
		a.scratch = a.scratch[:0]
		a.walk(p, func(b int32) bool {
			if a.whole(b) {
				a.scratch = append(a.scratch, b)
			}
			return true
		})
		for _, b := range a.scratch {
			a.freeSegment(b)
		}
	}
	for g := range a.segs {
		if a.segs[g].expandable {
			a.unmapTail(int32(g))
		}
	}
}

// releaseOversize is release_available_cached_blocks: with
// max_split_size set, free the smallest cached oversize block that covers
// the request, or else oversize blocks from the largest down until the
// request is covered.
func (a *Allocator) releaseOversize(size int64, small bool, s Stream) bool {
	ms := a.conf.maxSplit()
	if ms == noLimit {
		return false
	}
	p := poolOf(small)
	key := max(size, ms)
	if b := a.lowerBound(p, s, key); b != 0 && a.blocks[b].stream == s && a.whole(b) {
		a.freeSegment(b)
		return true
	}
	var freed int64
	for freed < key {
		b := a.lastOn(p, s)
		if b == 0 || a.blocks[b].size < ms || !a.whole(b) {
			break
		}
		freed += a.blocks[b].size
		a.freeSegment(b)
	}
	return freed >= key
}

// collect is garbage_collect_cached_blocks: when reserved memory is above
// garbage_collection_threshold of the limit, free whole cached blocks of
// the large pool, oldest first (age: pool searches since the block was
// cached): each pass frees every whole block at least as old as the mean,
// until enough is freed or nothing is.
func (a *Allocator) collect() {
	threshold := int64(a.conf.GCThreshold * float64(a.limit))
	if a.reserved <= threshold {
		return
	}
	target := a.reserved - threshold
	a.ProcessEvents()
	var total, count int64
	a.scratch = a.scratch[:0]
	a.walk(1, func(b int32) bool {
		if a.whole(b) {
			total += a.age(b)
			count++
			a.scratch = append(a.scratch, b)
		}
		return true
	})
	var got int64
	freed := true
	for got < target && freed && count > 0 {
		mean := float64(total) / float64(count)
		freed = false
		kept := a.scratch[:0]
		for _, b := range a.scratch {
			if float64(a.age(b)) >= mean {
				freed = true
				got += a.blocks[b].size
				total -= a.age(b)
				count--
				a.freeSegment(b)
				continue
			}
			kept = append(kept, b)
		}
		a.scratch = kept
	}
}

func (a *Allocator) age(b int32) int64 {
	return a.searches[poolOf(a.segs[a.blocks[b].seg].small)] - a.blocks[b].gcBase
}

// page is the mapping granularity of an expandable segment.
func (a *Allocator) page(small bool) int64 {
	if small {
		return SmallBuffer
	}
	return a.conf.largeSegment()
}

// expand maps enough pages at the end of the stream's expandable segment
// of the pool for a block of size bytes (try_allocate_expandable_block):
// a free block at the segment's end counts towards the request.
func (a *Allocator) expand(size int64, small bool, s Stream, force bool) int32 {
	g := int32(-1)
	for i := range a.segs {
		if x := &a.segs[i]; x.expandable && x.small == small && x.stream == s {
			g = int32(i)
			break
		}
	}
	if g < 0 {
		a.segs = append(a.segs, segRec{order: int64(len(a.segs)), small: small, expandable: true, stream: s})
		g = int32(len(a.segs) - 1)
	}
	last := a.segs[g].last
	var tail int64
	if last != 0 && a.blocks[last].free {
		tail = a.blocks[last].size
	}
	pg := a.page(small)
	grow := (size - tail + pg - 1) / pg * pg
	// alloc_block checks the limit against get_allocation_size, not the
	// pages it maps.
	if !force && a.limit > 0 && a.reserved+a.conf.allocationSize(size) > a.limit {
		return 0
	}
	a.reserved += grow
	if tail > 0 {
		a.uncache(last)
		a.blocks[last].size += grow
		a.segs[g].size += grow
		return last
	}
	b := a.newBlock()
	a.blocks[b] = blockRec{seg: g, off: a.segs[g].size, size: grow, prev: last, stream: s}
	if last != 0 {
		a.blocks[last].next = b
	}
	a.segs[g].last = b
	a.segs[g].size += grow
	return b
}

// unmapTail unmaps the whole pages of the free block at the end of
// expandable segment g. (PyTorch also unmaps the whole pages inside free
// blocks in the middle; memplan keeps those, docs/allocator.md §4.)
func (a *Allocator) unmapTail(g int32) {
	seg := &a.segs[g]
	b := seg.last
	if b == 0 || !a.blocks[b].free {
		return
	}
	pg := a.page(seg.small)
	x := &a.blocks[b]
	start := (x.off + pg - 1) / pg * pg
	cut := seg.size - start
	if cut <= 0 {
		return
	}
	a.uncache(b)
	seg.size -= cut
	a.reserved -= cut
	if start == x.off {
		prev := x.prev
		if prev != 0 {
			a.blocks[prev].next = 0
		}
		seg.last = prev
		a.dropBlock(b)
		return
	}
	x.size -= cut
	a.cache(b)
}

package estimate

import "sort"

// Caching-allocator constants from c10/cuda/CUDACachingAllocator.cpp (see
// docs/formulas.md §A and PYTORCH-MEMORY.md §1).
const (
	minBlock     = 512              // every request rounds up to a multiple of 512 B
	smallSize    = 1 << 20          // requests ≤ 1 MiB use the small pool
	smallBuffer  = 2 << 20          // small-pool segment size
	largeBuffer  = 20 << 20         // segment for 1 MiB < request < 10 MiB
	minLargeAllo = 10 << 20         // requests ≥ 10 MiB get their own segment
	roundLarge   = 2 << 20          // ... rounded up to 2 MiB
	splitRemain  = smallSize        // a large block is split only if > 1 MiB remains
	maxInt64     = int64(1<<63 - 1) // no max_split_size by default
)

// block is a piece of a segment, in use or cached.
type block struct {
	seg        *segment
	off, size  int64
	free       bool
	prev, next *block
}

type segment struct {
	id       int
	size     int64
	small    bool
	released bool
}

// allocator replays PyTorch's caching allocator on one stream: best-fit
// reuse of cached blocks, splitting, merging on free, and new segments from
// cudaMalloc when nothing cached fits. Segments are never returned (only
// empty_cache or an OOM retry would), which is what happens in a training
// loop that fits.
type allocator struct {
	pools     [2][]*block // free blocks sorted by (size, segment, offset): 0 small, 1 large
	segs      int
	allocated int64 // sum of handed-out block sizes (memory_allocated)
	reserved  int64 // sum of segment sizes (memory_reserved)

	// limit caps reserved memory as torch.cuda.set_per_process_memory_fraction
	// does (0: no cap). A new segment that would cross it first releases
	// every cached segment that is entirely free (release_cached_blocks)
	// and retries; if it still does not fit, oom is set.
	limit   int64
	retries int
	oom     bool

	segList []*segment
}

// Segments lists the sizes of the segments the allocator holds from the
// driver (its cudaMalloc calls still alive), in the order they were made.
func (a *allocator) Segments() []int64 {
	var out []int64
	for _, g := range a.segList {
		if !g.released {
			out = append(out, g.size)
		}
	}
	return out
}

// releaseCached frees every cached block that spans a whole segment, in
// both pools, as the allocator's out-of-memory path does before retrying.
func (a *allocator) releaseCached() {
	for i := range a.pools {
		kept := a.pools[i][:0]
		for _, b := range a.pools[i] {
			if b.prev == nil && b.next == nil {
				a.reserved -= b.size
				b.seg.released = true
				continue
			}
			kept = append(kept, b)
		}
		a.pools[i] = kept
	}
}

func roundSize(n int64) int64 {
	if n < minBlock {
		return minBlock
	}
	return (n + minBlock - 1) / minBlock * minBlock
}

func allocationSize(n int64) int64 {
	switch {
	case n <= smallSize:
		return smallBuffer
	case n < minLargeAllo:
		return largeBuffer
	}
	return (n + roundLarge - 1) / roundLarge * roundLarge
}

func less(a, b *block) bool {
	if a.size != b.size {
		return a.size < b.size
	}
	if a.seg.id != b.seg.id {
		return a.seg.id < b.seg.id
	}
	return a.off < b.off
}

func (a *allocator) insert(b *block) {
	p := &a.pools[poolOf(b.seg.small)]
	i := sort.Search(len(*p), func(i int) bool { return !less((*p)[i], b) })
	*p = append(*p, nil)
	copy((*p)[i+1:], (*p)[i:])
	(*p)[i] = b
}

func (a *allocator) remove(b *block) {
	p := &a.pools[poolOf(b.seg.small)]
	i := sort.Search(len(*p), func(i int) bool { return !less((*p)[i], b) })
	for i < len(*p) && (*p)[i] != b {
		i++
	}
	*p = append((*p)[:i], (*p)[i+1:]...)
}

func poolOf(small bool) int {
	if small {
		return 0
	}
	return 1
}

// malloc hands out a block for a request of n bytes.
func (a *allocator) malloc(n int64) *block {
	size := roundSize(n)
	small := size <= smallSize
	p := a.pools[poolOf(small)]
	i := sort.Search(len(p), func(i int) bool { return p[i].size >= size })
	var b *block
	if i < len(p) {
		b = p[i]
		a.remove(b)
	} else {
		as := allocationSize(size)
		if a.limit > 0 && a.reserved+as > a.limit {
			a.releaseCached()
			a.retries++
			if a.reserved+as > a.limit {
				a.oom = true
			}
		}
		a.segs++
		b = &block{seg: &segment{id: a.segs, size: as, small: small}, size: as}
		a.segList = append(a.segList, b.seg)
		a.reserved += as
	}
	rem := b.size - size
	if (small && rem >= minBlock) || (!small && rem > splitRemain) {
		r := &block{seg: b.seg, off: b.off + size, size: rem, free: true, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = r
		}
		b.next, b.size = r, size
		a.insert(r)
	}
	b.free = false
	a.allocated += b.size
	return b
}

// free returns a block to its pool, merged with free neighbours.
func (a *allocator) free(b *block) {
	a.allocated -= b.size
	b.free = true
	if n := b.next; n != nil && n.free {
		a.remove(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
	}
	if p := b.prev; p != nil && p.free {
		a.remove(p)
		p.size += b.size
		p.next = b.next
		if b.next != nil {
			b.next.prev = p
		}
		b = p
	}
	a.insert(b)
}

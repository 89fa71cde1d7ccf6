package alloc

import "slices"

// Layout is the allocator's state as a list of numbers, for a caller that
// detects when a simulation comes back to a state it was in before
// (estimate's pipeline replay, docs/parallelism.md §3.2): two allocators
// with the same configuration, no limit and equal layouts serve the same
// calls with the same blocks.

// AppendLayout appends the allocator's layout to dst: the bytes allocated
// and reserved and the frees waiting for ProcessEvents; then for every
// segment held, in the order made, its order key, size, stream, pool and
// whether it is expandable, and its blocks from the start: offset, size,
// stream, and −1 for a free block, −2 for a free block still used on
// another stream, −3 for a block freed while used on another stream and
// waiting for ProcessEvents, or label(b) for an allocated one.
func (a *Allocator) AppendLayout(dst []int64, label func(Block) int64) []int64 {
	// Room for every segment and block slot at once: one buffer, not a
	// doubling series of fresh ones whose pages a short process pays for.
	dst = slices.Grow(dst, 3+5*len(a.segs)+4*len(a.blocks))
	dst = append(dst, a.allocated, a.reserved, int64(len(a.pending)))
	rev := a.revBuf[:0]
	for i := range a.segs {
		g := &a.segs[i]
		if g.released {
			continue
		}
		dst = append(dst, g.order, g.size, int64(g.stream), b2i(g.small), b2i(g.expandable))
		rev = rev[:0]
		for b := g.last; b != 0; b = a.blocks[b].prev {
			rev = append(rev, b)
		}
		for i := len(rev) - 1; i >= 0; i-- {
			r := &a.blocks[rev[i]]
			state := int64(-1)
			switch {
			case r.free && r.recorded:
				state = -2
			case r.pending:
				state = -3
			case !r.free:
				state = label(Block(rev[i]))
			}
			dst = append(dst, r.off, r.size, int64(r.stream), state)
		}
	}
	a.revBuf = rev[:0]
	return dst
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

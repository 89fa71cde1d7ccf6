package alloc

// Fragmentation describes the cache when reserved memory first reached
// its peak (docs/allocator.md §5).
type Fragmentation struct {
	// Reserved and Allocated are memory_reserved and memory_allocated then.
	Reserved  int64 `json:"reserved_bytes"`
	Allocated int64 `json:"allocated_bytes"`
	// Unallocated is Reserved - Allocated: what PyTorch's out-of-memory
	// message calls "reserved but unallocated".
	Unallocated int64 `json:"unallocated_bytes"`
	// LargestFree is the largest cached block.
	LargestFree int64 `json:"largest_free_block_bytes"`
	// InactiveSplit is the bytes of cached blocks in segments that are
	// partly in use (memory_stats' inactive_split_bytes): memory that can
	// serve only requests that fit in the holes. Like PyTorch, it leaves out
	// expandable segments.
	InactiveSplit int64 `json:"inactive_split_bytes"`
}

// Fragmentation returns the state of the cache at the peak of reserved
// memory.
func (a *Allocator) Fragmentation() Fragmentation { return a.frag }

func (a *Allocator) snapshot() {
	a.frag = Fragmentation{
		Reserved:      a.reserved,
		Allocated:     a.allocated,
		Unallocated:   a.reserved - a.allocated,
		LargestFree:   a.largestFree(),
		InactiveSplit: a.inactiveSplit,
	}
}

func (a *Allocator) largestFree() int64 {
	var m int64
	for p := range a.index {
		if a.streams <= 1 {
			m = max(m, a.lastSize(p, 0))
			continue
		}
		for s := int32(0); s < a.streams; s++ {
			m = max(m, a.lastSize(p, Stream(s)))
		}
	}
	return m
}

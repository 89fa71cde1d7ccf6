package alloc

import (
	"unsafe"

	"github.com/memplan/memplan/internal/prefault"
)

// Block is a handle to a block handed out by Malloc; the zero Block is no
// block. A handle is valid until the block is freed.
type Block int32

// Valid reports whether b refers to a block.
func (b Block) Valid() bool { return b != 0 }

// Stream identifies a CUDA stream; 0 is the default stream. Cached blocks
// serve only requests on the stream that allocated them.
type Stream int32

type blockRec struct {
	off, size  int64
	seg        int32
	prev, next int32 // neighbours in the segment (0: none)
	bkt, hpos  int32 // while free: its bucket, and its place in the bucket's heap
	stream     Stream
	gcBase     int64 // the pool's search count when the block was cached
	order      int64 // the segment's order key, copied while the block is cached
	free       bool
	recorded   bool // used on another stream (record_stream): free waits for ProcessEvents
	pending    bool // freed while recorded: waiting for ProcessEvents
	counted    bool // counted in inactiveSplit while free
}

type segRec struct {
	order      int64 // the order key: the device address (address.go) or the allocation order
	chunk      int32 // the driver's chunk holding the segment (address.go)
	size       int64 // bytes reserved (mapped, for an expandable segment)
	last       int32 // the block at the segment's end
	small      bool
	expandable bool
	released   bool
	stream     Stream
}

// Allocator simulates PyTorch's CUDA caching allocator on one device
// (DeviceCachingAllocator in c10/cuda/CUDACachingAllocator.cpp): rounding,
// per-stream best-fit reuse from a small and a large pool, splitting and
// merging, segments from cudaMalloc (or pages of expandable segments), and
// the out-of-memory path under a limit. docs/allocator.md describes it.
// The zero Allocator is ready to use with the default settings.
type Allocator struct {
	conf  Config
	limit int64

	blocks   []blockRec // slab; index 0 is unused
	spare    []int32    // recycled block slots
	segs     []segRec
	index    [2]sizeIndex   // stream 0's free blocks by size (tree.go): 0 small pool, 1 large pool
	side     [2][]sizeIndex // the other streams' (side[p][s-1])
	buckets  []bucket       // slab of buckets (tree.go); index 0 is unused
	spareBk  []int32        // recycled buckets
	gap      gapEnt         // an entry left without blocks, still in its index (tree.go)
	walkBuf  []hent
	revBuf   []int32  // AppendLayout's
	searches [2]int64 // get_free_block calls per pool (garbage collection ages)
	streams  int32    // highest stream used, +1
	pending  []int32  // frees waiting for ProcessEvents
	scratch  []int32

	// addr, when set, gives the order key (device address) of the n-th
	// segment instead of the address model: the replay tests use real
	// addresses.
	addr func(n int) int64
	va   vaSpace // the driver's placement of segments (address.go)

	allocated, reserved int64
	retries, ooms       int
	oom                 bool
	inactiveSplit       int64
	oversizeAllocs      int // blocks ≥ max_split_size_mb handed out
	oversizeSegs        int // segments ≥ max_split_size_mb held
	frag                Fragmentation
}

// New returns an allocator with configuration c.
func New(c Config) *Allocator {
	a := &Allocator{}
	a.Reset(c)
	return a
}

// Reset empties the allocator (no limit) and sets its configuration,
// keeping its memory for the next simulation.
func (a *Allocator) Reset(c Config) {
	*a = Allocator{
		conf:    c,
		blocks:  a.blocks[:0],
		spare:   a.spare[:0],
		segs:    a.segs[:0],
		pending: a.pending[:0],
		scratch: a.scratch[:0],
		buckets: a.buckets[:0],
		spareBk: a.spareBk[:0],
		walkBuf: a.walkBuf[:0],
		revBuf:  a.revBuf[:0],
		index:   a.index,
		side:    a.side,
		va:      a.va,
	}
	for p := range a.index {
		a.index[p].ents = a.index[p].ents[:0]
		for i := range a.side[p] {
			a.side[p][i].ents = a.side[p][i].ents[:0]
		}
	}
	a.va.reset()
	a.init()
}

func (a *Allocator) init() {
	if len(a.blocks) == 0 {
		a.blocks = append(a.blocks, blockRec{})
	}
	if len(a.buckets) == 0 {
		a.buckets = append(a.buckets[:0], bucket{})
	}
}

// modelsAddresses says whether segments are placed by the address model
// (vaSpace): under OrderAddress without an address function of its own.
func (a *Allocator) modelsAddresses() bool {
	return a.conf.SegmentOrder == OrderAddress && a.addr == nil
}

// Library is a library whose first kernels change the driver's address
// space (Allocator.LibraryLoaded).
type Library int

// The libraries whose first kernels open the context chunk's room.
const (
	CuDNN  Library = iota // a convolution's
	CuBLAS                // a matrix product's
)

// LibraryLoaded tells the address model that library l's first kernels
// ran (cuDNN's first convolution, cuBLAS's first product): the driver frees
// the context's reservation, once, and maps the library's code
// (vaSpace.openRoom); later segments carve the freed range upwards, or fill
// it top-down where it became a gap.
// It does nothing under OrderAge or with an address function of its own.
func (a *Allocator) LibraryLoaded(l Library) {
	if a.modelsAddresses() {
		a.va.openRoom(l)
	}
}

// CommunicatorUp tells the address model that the process's first NCCL
// communicator came up (its first collective): the driver maps NCCL's
// chunks, with room later segments carve from (vaSpace.communicatorUp).
func (a *Allocator) CommunicatorUp() {
	if a.modelsAddresses() {
		a.va.communicatorUp()
	}
}

// PeerConnected tells the address model that NCCL made its first
// point-to-point connection: the lower of its chunks comes free.
func (a *Allocator) PeerConnected() {
	if a.modelsAddresses() {
		a.va.peerConnected()
	}
}

// Config returns the allocator's settings.
func (a *Allocator) Config() Config { return a.conf }

// SetLimit caps reserved memory, as torch.cuda.set_per_process_memory_fraction
// does (0: no cap).
func (a *Allocator) SetLimit(n int64) { a.limit = n }

// Allocated is memory_allocated(): the bytes of the blocks handed out.
func (a *Allocator) Allocated() int64 { return a.allocated }

// Reserved is memory_reserved(): the bytes held from the driver.
func (a *Allocator) Reserved() int64 { return a.reserved }

// Retries is num_alloc_retries: how often the cache was flushed to retry
// a cudaMalloc.
func (a *Allocator) Retries() int { return a.retries }

// OOM reports whether an allocation failed even after flushing the cache
// (the simulation goes on past the limit, so that the caller sees by how
// much it was crossed).
func (a *Allocator) OOM() bool { return a.oom }

// Oversize returns memory_stats' oversize_allocations and
// oversize_segments (current values): blocks handed out, and segments held,
// of max_split_size_mb or more. Both are 0 without max_split_size_mb.
func (a *Allocator) Oversize() (allocations, segments int) {
	return a.oversizeAllocs, a.oversizeSegs
}

// Size returns the bytes of block b (its rounded size, as memory_allocated
// counts it).
func (a *Allocator) Size(b Block) int64 { return a.blocks[b].size }

// Placement says where block b lies: the index of its segment in the
// order segments were made, its offset in it and the segment's bytes (for
// traces set beside a real allocator history's addresses).
func (a *Allocator) Placement(b Block) (segment int, offset, segmentBytes int64) {
	r := &a.blocks[b]
	return int(r.seg), r.off, a.segs[r.seg].size
}

// StreamOf is the stream whose pool holds block b.
func (a *Allocator) StreamOf(b Block) Stream { return a.segs[a.blocks[b].seg].stream }

// ReservedOn is the bytes of the segments stream s holds from the driver:
// its own pool (a block freed on one stream serves only that stream).
func (a *Allocator) ReservedOn(s Stream) int64 {
	var n int64
	for i := range a.segs {
		if g := &a.segs[i]; !g.released && g.stream == s {
			n += g.size
		}
	}
	return n
}

// Segments lists the bytes of each segment still held from the driver, in
// the order they were made.
func (a *Allocator) Segments() []int64 {
	n := 0
	for i := range a.segs {
		if g := &a.segs[i]; !g.released && g.size > 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]int64, 0, n)
	for i := range a.segs {
		if g := &a.segs[i]; !g.released && g.size > 0 {
			out = append(out, g.size)
		}
	}
	return out
}

// newBlock returns a slot for a block record; a recycled slot keeps its
// old record, so the caller sets every field (each writes a whole
// blockRec).
func (a *Allocator) newBlock() int32 {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	a.init()
	if len(a.blocks) == cap(a.blocks) {
		// Double: append grows large slices by a quarter, copying a
		// large simulation's slab many times over on its first run.
		// The new slab is fresh memory: map its pages in one call
		// (internal/prefault).
		nb := make([]blockRec, 0, 2*cap(a.blocks))
		prefault.Range(unsafe.Pointer(unsafe.SliceData(nb)), uintptr(cap(nb))*unsafe.Sizeof(blockRec{}))
		a.blocks = append(nb, a.blocks...)
	}
	a.blocks = append(a.blocks, blockRec{})
	return int32(len(a.blocks) - 1)
}

func (a *Allocator) dropBlock(b int32) { a.spare = append(a.spare, b) }

func poolOf(small bool) int {
	if small {
		return 0
	}
	return 1
}

// cache puts free block b into its pool.
func (a *Allocator) cache(b int32) {
	x := &a.blocks[b]
	g := &a.segs[x.seg]
	p := poolOf(g.small)
	x.free = true
	x.gcBase = a.searches[p]
	x.order = g.order
	// inactive_split leaves out expandable segments, whose free pages can
	// always be unmapped (free_block).
	x.counted = (x.prev != 0 || x.next != 0) && !g.expandable
	if x.counted {
		a.inactiveSplit += x.size
	}
	a.pushBlock(p, b, x)
}

// uncache takes block b out of its pool.
func (a *Allocator) uncache(b int32) {
	x := &a.blocks[b]
	a.popBlock(b, x)
	if x.counted {
		a.inactiveSplit -= x.size
		x.counted = false
	}
	x.free = false
}

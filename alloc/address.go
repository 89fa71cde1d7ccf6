package alloc

// vaSpace models where the CUDA driver places the allocations cudaMalloc
// returns, so that segments can be ordered by device address as PyTorch's
// BlockComparatorSize orders cached blocks. docs/allocator.md §8 gives the
// rules and the measurements they reproduce (every address of 3,380 raw
// cudaMalloc calls, with 2,003 cudaFree calls between them):
//
//   - Allocations are carved from chunks of address space. A request
//     (rounded up to 2 MiB) goes to the newest chunk that has a free piece
//     large enough, into the smallest such piece of that chunk (the lowest
//     of equal ones), at the piece's low end.
//   - If no chunk has room, a new chunk of the request rounded up to 32 MiB
//     is reserved top-down: in the highest gap between chunks of at least
//     the chunk plus 30 MiB (an aligned reservation with its slack), at the
//     gap's top; else below the lowest chunk (the frontier).
//   - cudaFree returns the piece to its chunk; a chunk left empty is
//     released, its range a gap again (or the frontier moves up).
//   - A new context holds two chunks of its own above the frontier: a
//     2 MiB piece free 414 MiB above it in the lower, newer one (the rest
//     of it the driver's reservation, which a library's first kernels
//     free: openRoom, communicatorUp) and a 24 MiB piece free 488 MiB
//     above it in the upper one.
//   - Host memory the process maps shares the address space: it takes
//     the highest gap that holds it, else the frontier (mapHost).
//
// Only the order of the addresses is used. The chunks live in a slab in
// creation order under a max-tree of their largest free piece, so that the
// newest chunk with room is found in O(log n); their free pieces are
// linked lists in a slab; the gaps are a treap keyed by address carrying
// the largest gap of each subtree (gapTreap).
type vaSpace struct {
	frontier int64
	chunks   []vaChunk
	room     []int64 // max-tree over chunks: largest free piece, -1 if none
	leaves   int     // leaves of room (a power of two)
	pieces   []vaPiece
	spare    []int32 // free piece slots
	gaps     gapTreap
	ctxX     int32   // the context's lower chunk: its reservation and 2 MiB piece
	loaded   [2]bool // by Library, whose code is mapped (openRoom)
	opened   bool    // the context's reservation is freed (openReservation)
	ncclUp   bool    // the first communicator's chunks are mapped (communicatorUp)
	ncclB    int32   // NCCL's lower chunk while it is held (-1: none)
	ncclBAt  int64   // its start
}

type vaChunk struct {
	start, size int64
	live        int32 // allocations in the chunk
	head        int32 // its free pieces, by address (0: none)
}

type vaPiece struct {
	start, size int64
	next        int32
}

const (
	vaTop    = int64(1) << 46 // the context chunk's start; only order matters
	vaAlign  = 32 << 20       // chunk granule and alignment
	vaSlack  = vaAlign - vaGrain
	vaGrain  = 2 << 20 // allocation granule
	ctxSmall = 414 << 20
	ctxLarge = 488 << 20
)

// reset empties the space to a new context's, keeping its memory.
func (v *vaSpace) reset() {
	v.frontier = vaTop
	v.loaded = [2]bool{}
	v.opened = false
	v.ncclUp, v.ncclB = false, -1
	v.chunks = v.chunks[:0]
	v.pieces = append(v.pieces[:0], vaPiece{})
	v.spare = v.spare[:0]
	v.leaves = 1
	v.room = append(v.room[:0], -1, -1)
	v.gaps.reset()
	c := v.addChunk(vaTop+ctxX, 1<<40)
	v.chunks[c].live = 1 // never released
	v.chunks[c].head = v.newPiece(vaTop+ctxLarge, 24<<20, 0)
	v.update(c)
	v.ctxX = v.addChunk(vaTop, ctxX)
	x := &v.chunks[v.ctxX]
	x.live = 1 // the driver's reservation below ctxSmall (openRoom)
	x.head = v.newPiece(vaTop+ctxSmall, vaGrain, 0)
	v.update(v.ctxX)
}

// The context's room. A new context holds two chunks above all others: the
// upper one with the 24 MiB piece (ctxLarge), the lower one (ctxX bytes,
// the newer of the two) reserved by the driver up to ctxSmall with the
// 2 MiB piece above it. A library's first kernels free that reservation
// and map the library's code (libBytes) by the usual rules. If the 2 MiB
// piece is in use then, the lower chunk lives on and its freed range is a
// piece later segments are carved upwards from, after the code (cuBLAS's
// first product: from 64 MiB, its workspace the first segment there;
// cuDNN's first convolution: from 6 MiB). If it is free, the chunk is
// empty and goes: its range is a gap that new chunks fill top-down, the
// code first (cuBLAS's workspace at 320 MiB, the segments after it below;
// measured on an H200, driver 580.159.04: bench/torch/addr/va_libs.py and
// va_room.py, the histories of held-out set 55 and of the tiny MoE;
// docs/allocator.md §8).
const ctxX = ctxSmall + vaGrain

// libBytes is the code each Library's first kernels map.
var libBytes = [2]int64{CuDNN: 6 << 20, CuBLAS: 64 << 20}

// libHost is the host memory each Library's first use maps into the same
// address space (mapHost): cuBLAS's handle, 50 to 74 MiB in
// bench/torch/addr/va_maps.py's five processes on an H200 (the median, to
// the 2 MiB granule); cuDNN's is not measured.
var libHost = [2]int64{CuBLAS: 58 << 20}

// openRoom frees the context's reservation when the first library loads
// and maps library l's code, once per library.
func (v *vaSpace) openRoom(l Library) {
	if len(v.chunks) == 0 {
		v.reset()
	}
	if v.loaded[l] {
		return
	}
	v.openReservation()
	v.loaded[l] = true
	v.alloc(libBytes[l])
	if libHost[l] > 0 && hostMemoryMapped {
		v.mapHost(libHost[l])
	}
}

// openReservation frees the context's reservation, once: at the first
// library's first kernels (cuBLAS, cuDNN, or NCCL's as its first
// communicator comes up).
func (v *vaSpace) openReservation() {
	if v.opened {
		return
	}
	v.opened = true
	v.free(vaTop, ctxSmall, v.ctxX)
}

// mapHost places n bytes of host memory the process maps (never unmapped):
// the kernel's mmap hands out the same address space top-down, the highest
// gap that holds them (with no alignment slack), else below the frontier.
// Where the context's freed reservation is a gap, host memory mapped
// before the segments that would fill it takes it (measured from
// /proc/self/maps on two H200s: bench/torch/addr/va_maps.py;
// docs/allocator.md §8, thirty-seventh session).
func (v *vaSpace) mapHost(n int64) {
	n = (n + vaGrain - 1) / vaGrain * vaGrain
	c := v.addChunk(v.topDown(n, 0), n)
	v.chunks[c].live = 1
	v.update(c)
}

// topDown reserves size bytes where the kernel's top-down search puts
// them: at the top of the highest gap of at least size plus slack, else
// below the frontier, which moves. It returns the start.
func (v *vaSpace) topDown(size, slack int64) int64 {
	g := v.gaps.highest(size + slack)
	if g == 0 {
		v.frontier -= size
		return v.frontier
	}
	x := v.gaps.nodes[g]
	v.gaps.remove(x.start)
	if rest := x.size - size; rest > 0 {
		v.gaps.insert(x.start, rest)
	}
	return x.start + x.size - size
}

// NCCL's chunks: as the process's first communicator comes up (its first
// collective) its kernels free the context's reservation, and its set-up
// maps ncclHost bytes of host memory (its host buffers, the PTX JIT
// compiler's library and a 64 MiB reservation among them) before the
// driver maps, top-down, a chunk whose top ncclTop bytes NCCL keeps and
// whose lower ncclRoomA bytes later segments carve from at once; below it
// ncclHeld bytes; below those ncclRoomB bytes, held until the first
// point-to-point connection and free after (measured on two H200s:
// bench/torch/dist/va_nccl.py, and the host memory from /proc/self/maps,
// bench/torch/addr/va_maps.py; docs/allocator.md §8).
const (
	ncclHost  = 352 << 20
	ncclTop   = 32 << 20
	ncclRoomA = 480 << 20
	ncclHeld  = 320 << 20
	ncclRoomB = 672 << 20
)

// hostMemoryMapped is whether communicatorUp frees the context's
// reservation and maps NCCL's host memory, and openRoom a library's (always
// but in the tests that undo it, TestNCCLHostMemory and
// TestReplayPipelineStages).
var hostMemoryMapped = true

// communicatorUp maps NCCL's chunks, once.
func (v *vaSpace) communicatorUp() {
	if len(v.chunks) == 0 {
		v.reset()
	}
	if v.ncclUp {
		return
	}
	v.ncclUp = true
	if hostMemoryMapped {
		v.openReservation()
		v.mapHost(ncclHost)
	}
	m, c := v.alloc(ncclTop + ncclRoomA)
	v.alloc(ncclHeld)
	v.ncclBAt, v.ncclB = v.alloc(ncclRoomB)
	v.chunks[c].head = v.newPiece(m, ncclRoomA, 0)
	v.update(c)
}

// peerConnected frees NCCL's lower chunk, once.
func (v *vaSpace) peerConnected() {
	if !v.ncclUp {
		v.communicatorUp()
	}
	if v.ncclB < 0 {
		return
	}
	c := v.ncclB
	v.ncclB = -1
	v.chunks[c].head = v.newPiece(v.ncclBAt, ncclRoomB, 0)
	v.update(c)
}

// alloc returns the address of an allocation of n bytes and its chunk.
func (v *vaSpace) alloc(n int64) (addr int64, chunk int32) {
	if len(v.chunks) == 0 {
		v.reset()
	}
	n = (n + vaGrain - 1) / vaGrain * vaGrain
	if c := v.newestWithRoom(n); c >= 0 {
		return v.carve(c, n), c
	}
	size := (n + vaAlign - 1) / vaAlign * vaAlign
	start := v.topDown(size, vaSlack)
	c := v.addChunk(start, size)
	if n < size {
		v.chunks[c].head = v.newPiece(start+n, size-n, 0)
	}
	v.chunks[c].live = 1
	v.update(c)
	return start, c
}

// free returns the n bytes at addr to chunk c.
func (v *vaSpace) free(addr, n int64, c int32) {
	n = (n + vaGrain - 1) / vaGrain * vaGrain
	ch := &v.chunks[c]
	if ch.live--; ch.live == 0 {
		v.release(c)
		return
	}
	// Insert the piece in address order, merged with its neighbours.
	var prev int32
	p := ch.head
	for p != 0 && v.pieces[p].start < addr {
		prev, p = p, v.pieces[p].next
	}
	if p != 0 && v.pieces[p].start == addr+n {
		n += v.pieces[p].size
		next := v.pieces[p].next
		v.spare = append(v.spare, p)
		p = next
	}
	if prev != 0 && v.pieces[prev].start+v.pieces[prev].size == addr {
		v.pieces[prev].size += n
		v.pieces[prev].next = p
	} else if prev != 0 {
		v.pieces[prev].next = v.newPiece(addr, n, p)
	} else {
		ch.head = v.newPiece(addr, n, p)
	}
	v.update(c)
}

// release returns empty chunk c's range: a gap, or the frontier moves up.
func (v *vaSpace) release(c int32) {
	ch := &v.chunks[c]
	for p := ch.head; p != 0; p = v.pieces[p].next {
		v.spare = append(v.spare, p)
	}
	ch.head = 0
	v.update(c)
	start, end := ch.start, ch.start+ch.size
	if g := v.gaps.find(end); g != 0 {
		end += v.gaps.nodes[g].size
		v.gaps.remove(ch.start + ch.size)
	}
	if start == v.frontier {
		v.frontier = end
		return
	}
	if g := v.gaps.floor(start); g != 0 && v.gaps.nodes[g].start+v.gaps.nodes[g].size == start {
		start = v.gaps.nodes[g].start
		v.gaps.remove(start)
	}
	v.gaps.insert(start, end-start)
}

// carve takes n bytes from chunk c's smallest free piece that fits.
func (v *vaSpace) carve(c int32, n int64) int64 {
	ch := &v.chunks[c]
	var best, bestPrev, prev int32
	for p := ch.head; p != 0; prev, p = p, v.pieces[p].next {
		if s := v.pieces[p].size; s >= n && (best == 0 || s < v.pieces[best].size) {
			best, bestPrev = p, prev
		}
	}
	x := &v.pieces[best]
	addr := x.start
	if x.size > n {
		x.start += n
		x.size -= n
	} else {
		if bestPrev != 0 {
			v.pieces[bestPrev].next = x.next
		} else {
			ch.head = x.next
		}
		v.spare = append(v.spare, best)
	}
	ch.live++
	v.update(c)
	return addr
}

func (v *vaSpace) newPiece(start, size int64, next int32) int32 {
	if k := len(v.spare); k > 0 {
		p := v.spare[k-1]
		v.spare = v.spare[:k-1]
		v.pieces[p] = vaPiece{start: start, size: size, next: next}
		return p
	}
	v.pieces = append(v.pieces, vaPiece{start: start, size: size, next: next})
	return int32(len(v.pieces) - 1)
}

// addChunk appends a chunk (with no free piece yet), growing the max-tree.
func (v *vaSpace) addChunk(start, size int64) int32 {
	v.chunks = append(v.chunks, vaChunk{start: start, size: size})
	c := len(v.chunks) - 1
	if c >= v.leaves {
		// Double the leaves, keeping the slice's memory where it suffices.
		old, need := v.leaves, 4*v.leaves
		room := v.room
		if cap(room) >= need {
			room = room[:need]
		} else {
			room = make([]int64, need)
		}
		copy(room[2*old:3*old], v.room[old:2*old])
		for i := 3 * old; i < need; i++ {
			room[i] = -1
		}
		v.leaves = 2 * old
		for i := v.leaves - 1; i > 0; i-- {
			room[i] = max(room[2*i], room[2*i+1])
		}
		v.room = room
	}
	return int32(c)
}

// update sets chunk c's largest free piece in the max-tree.
func (v *vaSpace) update(c int32) {
	m := int64(-1)
	for p := v.chunks[c].head; p != 0; p = v.pieces[p].next {
		m = max(m, v.pieces[p].size)
	}
	i := v.leaves + int(c)
	v.room[i] = m
	for i /= 2; i > 0; i /= 2 {
		v.room[i] = max(v.room[2*i], v.room[2*i+1])
	}
}

// newestWithRoom returns the newest chunk with a free piece of at least n
// bytes, or -1.
func (v *vaSpace) newestWithRoom(n int64) int32 {
	if v.room[1] < n {
		return -1
	}
	i := 1
	for i < v.leaves {
		if v.room[2*i+1] >= n {
			i = 2*i + 1
		} else {
			i = 2 * i
		}
	}
	return int32(i - v.leaves)
}

// segmentOrder returns the order key of a new segment of n bytes (and its
// chunk in the address model): the address the driver would give it under
// OrderAddress, the count of segments so far under OrderAge.
func (a *Allocator) segmentOrder(n int64) (int64, int32) {
	switch {
	case a.addr != nil:
		return a.addr(len(a.segs)), 0
	case a.conf.SegmentOrder == OrderAddress:
		if len(a.va.chunks) == 0 {
			a.va.reset()
		}
		return a.va.alloc(n)
	}
	return int64(len(a.segs)), 0
}

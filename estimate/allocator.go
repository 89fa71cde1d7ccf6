package estimate

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/memplan/memplan/alloc"
)

// block is a block handed out by the caching-allocator simulation.
type block = alloc.Block

// allocator adapts alloc.Allocator (the caching allocator, docs/allocator.md)
// to the simulator, which reads its counters as fields.
type allocator struct {
	a                   *alloc.Allocator // from allocators, at the first use
	allocated, reserved int64            // memory_allocated, memory_reserved
	// limit caps reserved memory as torch.cuda.set_per_process_memory_fraction
	// does (0: no cap); oom says an allocation failed under it even after
	// the cache was flushed and the allocation retried (retries).
	limit   int64
	retries int
	oom     bool
	// stopAt, with stopped set (Options.StopAbove), is the reserved
	// memory past which the simulation stops; stopped is shared by the
	// simulations of one estimate, so that one rank's stop ends the others.
	stopAt  int64
	stopped *atomic.Bool
}

// allocators keeps allocators between simulations: a search runs thousands of
// them, and an allocator's slab grows to every block the run holds. It is
// a plain stack, not a sync.Pool: a pool is emptied by the garbage
// collector, which a large simulation (a mixture of experts holds hundreds
// of thousands of blocks) triggers itself, so every simulation would grow
// its slab again from nothing.
var allocators struct {
	sync.Mutex
	free []*alloc.Allocator
}

// maxSpareAllocators bounds the allocators kept (one per concurrent
// simulation is enough).
const maxSpareAllocators = 8

func getAllocator() *alloc.Allocator {
	allocators.Lock()
	defer allocators.Unlock()
	if n := len(allocators.free); n > 0 {
		a := allocators.free[n-1]
		allocators.free = allocators.free[:n-1]
		return a
	}
	return new(alloc.Allocator)
}

func putAllocator(a *alloc.Allocator) {
	allocators.Lock()
	defer allocators.Unlock()
	if len(allocators.free) < maxSpareAllocators {
		allocators.free = append(allocators.free, a)
	}
}

// use returns the allocator, taking one from allocators with configuration c if
// there is none yet.
func (a *allocator) use(c alloc.Config) *alloc.Allocator {
	if a.a == nil {
		a.a = getAllocator()
		a.a.Reset(c)
	}
	return a.a
}

// release gives the allocator back to allocators; the simulation is over.
func (a *allocator) release() {
	if a.a != nil {
		putAllocator(a.a)
		a.a = nil
	}
}

func (a *allocator) malloc(n int64) block { return a.mallocOn(n, 0) }

func (a *allocator) free(b block) {
	a.a.Free(b)
	a.allocated = a.a.Allocated()
}

// Segments lists the segments held from the driver, in the order they
// were made.
func (a *allocator) Segments() []int64 { return a.use(alloc.Default()).Segments() }

// configure sets the allocator's PYTORCH_ALLOC_CONF settings; notes say
// what the simulation does not model.
func (a *allocator) configure(conf string) (notes []string, err error) {
	if conf == "" {
		return nil, nil
	}
	c, err := alloc.Parse(conf)
	if err != nil {
		return nil, fmt.Errorf("alloc_conf: %w", err)
	}
	a.release()
	a.use(c)
	if c.Backend == "cudaMallocAsync" {
		notes = append(notes, "backend:cudaMallocAsync is simulated as the native caching allocator (docs/allocator.md §2)")
	}
	if c.GCThreshold > 0 && a.limit == 0 {
		notes = append(notes, "garbage_collection_threshold acts only under a memory fraction (--cap); without one it changes nothing")
	}
	return notes, nil
}

// fragmentation is the cache at the peak of reserved memory.
func (a *allocator) fragmentation() *alloc.Fragmentation {
	f := a.use(alloc.Default()).Fragmentation()
	return &f
}

// mallocOn allocates on a side stream (an FSDP2 all-gather or
// reduce-scatter stream, docs/allocator.md §7): cached blocks serve only
// their own stream.
func (a *allocator) mallocOn(n int64, s alloc.Stream) block {
	if a.a == nil {
		a.use(alloc.Default())
	}
	a.a.SetLimit(a.limit)
	b := a.a.Malloc(n, s)
	a.allocated, a.reserved = a.a.Allocated(), a.a.Reserved()
	a.retries, a.oom = a.a.Retries(), a.a.OOM()
	if a.stopped != nil && (a.reserved > a.stopAt || a.stopped.Load()) {
		a.stopped.Store(true)
		panic(stopSignal{})
	}
	return b
}

// recordStream marks b as used on stream s (Tensor.record_stream): once
// freed it is reused only after processEvents.
func (a *allocator) recordStream(b block, s alloc.Stream) { a.a.RecordStream(b, s) }

// processEvents is where the simulated program waits for the other
// streams: blocks freed while in use there become reusable.
func (a *allocator) processEvents() { a.a.ProcessEvents() }

// madeBlock books t's new block of n bytes on stream st: the trace, the
// step being recorded (replay.go), the bytes alive by category, the peaks.
func (s *sim) madeBlock(t *tensor, n int64, st alloc.Stream) {
	s.calls++
	if s.trace != nil {
		s.trace(t, true)
	}
	if s.rec != nil {
		s.rec.logMalloc(t, n, st)
	}
	s.live[t.cat] += n
	s.observe()
}

// dropBlock frees t's block, booked as madeBlock books it.
func (s *sim) dropBlock(t *tensor) {
	s.calls++
	if s.trace != nil {
		s.trace(t, false)
	}
	if s.rec != nil {
		s.rec.logFree(t)
	}
	s.al.free(t.blk)
	s.live[t.cat] -= t.bytes()
}

// reallocate gives t, which holds its own storage, a new one and frees
// the old: a tensor whose data is replaced (set_data) by a freshly
// allocated one of the same size.
func (s *sim) reallocate(t *tensor) {
	if !t.blk.Valid() {
		return
	}
	n := s.alloc(t.elems, t.dt, t.cat, t.name)
	s.dropBlock(t)
	t.blk, n.blk = n.blk, 0
}

// addressEvent applies an event that is neither a malloc nor a free but
// changes what later ones find, and books it for the step being recorded
// (replay.go) and the debugging trace: evLibrary, library n's first kernels
// ran (alloc.Allocator.LibraryLoaded); evCommUp, the first NCCL
// communicator came up (CommunicatorUp); evPeer, NCCL's first
// point-to-point connection (PeerConnected) — each changes where the
// driver puts later segments —; evEmptyCache, torch.cuda.empty_cache
// (ReleaseCached).
func (s *sim) addressEvent(kind evKind, n int64) {
	if a := s.al.a; a != nil {
		switch kind {
		case evLibrary:
			a.LibraryLoaded(alloc.Library(n))
		case evCommUp:
			a.CommunicatorUp()
		case evPeer:
			a.PeerConnected()
		case evEmptyCache:
			a.ReleaseCached()
		}
	}
	if s.rec != nil {
		s.rec.log(kind, n)
	}
	if s.traceAddr != nil {
		s.traceAddr(kind, n)
	}
}

// emptyCache: torch.cuda.empty_cache(), the cache's unused segments back
// to the driver (addressEvent).
func (s *sim) emptyCache() { s.addressEvent(evEmptyCache, 0) }

// libraryLoaded: library l's first kernels ran (addressEvent).
func (s *sim) libraryLoaded(l alloc.Library) { s.addressEvent(evLibrary, int64(l)) }

// communicatorUp: the process's first NCCL communicator came up
// (addressEvent).
func (s *sim) communicatorUp() { s.addressEvent(evCommUp, 0) }

// peerConnected: NCCL made its first point-to-point connection
// (addressEvent).
func (s *sim) peerConnected() { s.addressEvent(evPeer, 0) }

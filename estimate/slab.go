package estimate

import (
	"sync"
	"unsafe"

	"github.com/memplan/memplan/internal/prefault"
)

// slabs hand out tensors, nodes, short pointer lists and layer instances
// from chunks, so
// that a simulation makes a few dozen heap objects instead of one per
// tensor, node and list (the garbage collector's work grows with the
// number of objects). Chunks return to pools when the simulation ends
// (release), so the estimates of one search reuse them.
type slabs struct {
	tensors []*[slabChunk]tensor
	nodes   []*[slabChunk]node
	lists   []*[listChunk]*tensor
	insts   []*[instChunk]inst
	wss     []*[wsChunk][3]inputWS
	// nt, nn, nl, ni and nw are how much of the last chunk of each is
	// used.
	nt, nn, nl, ni, nw int
	// cast is the weight-cast cache's map (castCache).
	cast *map[*tensor]*tensor
}

const (
	slabChunk = 1024
	listChunk = 4 * slabChunk
	instChunk = 256
	wsChunk   = 256
)

// chunkStack keeps released chunks for the next simulation. It is a plain
// stack, not a sync.Pool: the garbage collector empties a pool, and a large
// simulation triggers collections itself, so its chunks would be made
// again every time.
type chunkStack[T any] struct {
	mu   sync.Mutex
	free []*T
}

// maxSpareChunks bounds the chunks of each kind kept between simulations.
const maxSpareChunks = 512

func (c *chunkStack[T]) get() *T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		x := c.free[n-1]
		c.free = c.free[:n-1]
		return x
	}
	x := new(T) // fresh memory: map its pages in one call (internal/prefault)
	prefault.Range(unsafe.Pointer(x), unsafe.Sizeof(*x))
	return x
}

// put keeps x, which must be zeroed, but for chunks of tensors, nodes and
// lists (slabs.tensor, slabs.ptrs).
func (c *chunkStack[T]) put(x *T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.free) < maxSpareChunks {
		c.free = append(c.free, x)
	}
}

var (
	tapePool   chunkStack[[]*node]
	tensorPool chunkStack[[slabChunk]tensor]
	nodePool   chunkStack[[slabChunk]node]
	listPool   chunkStack[[listChunk]*tensor]
	instPool   chunkStack[[instChunk]inst]
	wsPool     chunkStack[[wsChunk][3]inputWS]
	castPool   chunkStack[map[*tensor]*tensor]
)

// castCache returns an empty map for autocast's weight-cast cache
// (sim.cache), with the memory of an earlier simulation's: the map grows
// to every weight of the model in each forward.
func (s *slabs) castCache() map[*tensor]*tensor {
	m := castPool.get()
	if *m == nil {
		*m = map[*tensor]*tensor{}
	}
	s.cast = m
	return *m
}

// tensor returns a zeroed tensor. Chunks of tensors and nodes are zeroed
// one element at a time as they are handed out, not when released: the
// element is written at once, so its memory is touched once an estimate
// rather than twice (a 7B estimate's 3 MB of tensors and nodes do not
// stay in the cache from one estimate to the next).
func (s *slabs) tensor() *tensor {
	if len(s.tensors) == 0 || s.nt == slabChunk {
		s.tensors = append(s.tensors, tensorPool.get())
		s.nt = 0
	}
	s.nt++
	t := &s.tensors[len(s.tensors)-1][s.nt-1]
	*t = tensor{}
	return t
}

// node returns a zeroed node.
func (s *slabs) node() *node {
	if len(s.nodes) == 0 || s.nn == slabChunk {
		s.nodes = append(s.nodes, nodePool.get())
		s.nn = 0
	}
	s.nn++
	n := &s.nodes[len(s.nodes)-1][s.nn-1]
	*n = node{}
	return n
}

// inst returns a zeroed layer instance (driver.go).
func (s *slabs) inst() *inst {
	if len(s.insts) == 0 || s.ni == instChunk {
		s.insts = append(s.insts, instPool.get())
		s.ni = 0
	}
	s.ni++
	return &s.insts[len(s.insts)-1][s.ni-1]
}

// workspaces returns a node's zeroed per-input workspaces (node.gradWS).
func (s *slabs) workspaces() *[3]inputWS {
	if len(s.wss) == 0 || s.nw == wsChunk {
		s.wss = append(s.wss, wsPool.get())
		s.nw = 0
	}
	s.nw++
	return &s.wss[len(s.wss)-1][s.nw-1]
}

// ptrs returns an empty list with room for n pointers; appending past n
// moves it to the heap without touching its neighbours.
func (s *slabs) ptrs(n int) []*tensor {
	if n > listChunk {
		return make([]*tensor, 0, n)
	}
	if len(s.lists) == 0 || s.nl+n > listChunk {
		s.lists = append(s.lists, listPool.get())
		s.nl = 0
	}
	c := s.lists[len(s.lists)-1]
	p := c[s.nl : s.nl : s.nl+n]
	s.nl += n
	return p
}

// newTape returns an empty tape with the memory of an earlier simulation's.
func (s *slabs) newTape() []*node {
	return (*tapePool.get())[:0]
}

// release zeroes the chunks and returns them to the pools, with tape (the
// simulation's tape, whose memory the next one reuses). Nothing of the
// simulation may be used afterwards.
func (s *slabs) release(tape []*node) {
	if cap(tape) > 0 {
		tape = tape[:cap(tape)]
		clear(tape)
		tapePool.put(&tape)
	}
	// Only the first used elements of each last chunk were handed out
	// (the rest is still zero); earlier chunks are zeroed whole.
	// Tensors and nodes are zeroed when handed out (tensor), and a list
	// is handed out empty (ptrs): their chunks go back as they are. Until
	// reused, they keep this simulation's pointers, so what it reached
	// stays alive that long (no more than one simulation's objects).
	for _, c := range s.tensors {
		tensorPool.put(c)
	}
	for _, c := range s.nodes {
		nodePool.put(c)
	}
	for _, c := range s.lists {
		listPool.put(c)
	}
	for i, c := range s.insts {
		clear(c[:used(i, len(s.insts), s.ni, instChunk)])
		instPool.put(c)
	}
	for i, c := range s.wss {
		clear(c[:used(i, len(s.wss), s.nw, wsChunk)])
		wsPool.put(c)
	}
	if s.cast != nil {
		clear(*s.cast)
		castPool.put(s.cast)
	}
	*s = slabs{}
}

// used is how much of chunk i of n was handed out: all of it but the
// last's last elements.
func used(i, n, last, size int) int {
	if i == n-1 {
		return last
	}
	return size
}

// subTape returns an empty tape for a recomputed segment, with the memory
// of an earlier one: a segment's backward is over before its tape goes
// back to spareTapes, and a segment recomputed inside it takes another.
func (s *sim) subTape() []*node {
	n := len(s.spareTapes)
	if n == 0 {
		return nil
	}
	t := s.spareTapes[n-1]
	s.spareTapes = s.spareTapes[:n-1]
	return t
}

// workspaces returns ws in the simulation's slab, for node.gradWS.
func (s *sim) workspaces(ws [3]inputWS) *[3]inputWS {
	w := s.slab.workspaces()
	*w = ws
	return w
}

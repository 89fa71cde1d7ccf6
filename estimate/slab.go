package estimate

// slabs hand out tensors, nodes and short pointer lists from chunks, so
// that a simulation makes a few hundred heap objects instead of one per
// tensor, node and list (the garbage collector's work grows with the
// number of objects). What a chunk holds lives as long as any pointer into
// it; nothing is reused within one simulation.
type slabs struct {
	tensors []tensor
	nodes   []node
	list    []*tensor
}

const slabChunk = 1024

func (s *slabs) tensor() *tensor {
	if len(s.tensors) == 0 {
		s.tensors = make([]tensor, slabChunk)
	}
	t := &s.tensors[0]
	s.tensors = s.tensors[1:]
	return t
}

func (s *slabs) node() *node {
	if len(s.nodes) == 0 {
		s.nodes = make([]node, slabChunk)
	}
	n := &s.nodes[0]
	s.nodes = s.nodes[1:]
	return n
}

// ptrs returns an empty list with room for n pointers; appending past n
// moves it to the heap without touching its neighbours.
func (s *slabs) ptrs(n int) []*tensor {
	if n > len(s.list) {
		s.list = make([]*tensor, max(n, 4*slabChunk))
	}
	p := s.list[:0:n]
	s.list = s.list[n:]
	return p
}

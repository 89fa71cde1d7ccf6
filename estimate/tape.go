package estimate

// The autograd tape: the nodes a forward records, what each saves for
// backward, and when the saved tensors are released.

// save makes node n hold t for backward. Inside a checkpointed segment's
// first forward nothing is held, but the saves are counted (earlyStop).
func (s *sim) save(n *node, ts ...*tensor) {
	if !s.saving || s.stop.stopped {
		for _, t := range ts {
			if t != nil && !s.saving {
				s.stop.counted++
				s.stop.tape = len(s.tape)
			}
		}
		return
	}
	for _, t := range ts {
		if t == nil {
			continue
		}
		if s.stop.limit > 0 {
			s.stop.counted++
			s.stop.stopped = s.stop.counted == s.stop.limit
			if s.stop.stopped {
				defer s.leakUnwaited()
			}
		}
		s.ref(t)
		b := t
		if t.base != nil {
			b = t.base
		}
		b.saves++
		s.recat(b)
		if len(n.saved) == cap(n.saved) {
			// Grow within the slab rather than on the heap.
			n.saved = append(s.slab.ptrs(2*cap(n.saved)+2), n.saved...)
		}
		n.saved = append(n.saved, t)
	}
}

func (s *sim) release(n *node) {
	for _, t := range n.saved {
		b := t
		if t.base != nil {
			b = t.base
		}
		b.saves--
		s.recat(b)
		s.unref(t)
	}
	n.saved = nil
}

// record adds a node to the tape if any input requires grad, and marks the
// outputs as requiring grad. It returns nil when no graph is built.
func (s *sim) record(name string, ins []*tensor, outs ...*tensor) *node {
	nreq := 0
	for _, t := range ins {
		if t != nil && t.req {
			nreq++
		}
		if t != nil && t.unwaited {
			t.unwaited = false // read: AsyncCollectiveTensor waits
		}
	}
	if nreq == 0 {
		return nil
	}
	// One list holds the node's inputs, outputs and first two saved
	// tensors, each part capped so that appending past it moves it.
	no := len(outs)
	all := s.slab.ptrs(nreq + no + 2)
	req := all[:0:nreq]
	for _, t := range ins {
		if t != nil && t.req {
			req = append(req, t)
		}
	}
	out := all[nreq : nreq : nreq+no]
	for _, o := range outs {
		o.req = true
		out = append(out, o)
	}
	n := s.slab.node() // zeroed
	n.name, n.ins, n.outs = name, req, out
	n.unit = s.curUnit
	n.saved = all[nreq+no : nreq+no : nreq+no+2]
	s.tape = append(s.tape, n)
	return n
}

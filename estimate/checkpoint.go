package estimate

// torch.utils.checkpoint (use_reentrant=False): a segment's recompute in
// backward, and its early stop (docs/pytorch-memory.md §4). The first
// forward is sim.checkpointed (driver.go).

type ckpt struct {
	run func(x *tensor) *tensor
	// saves counts the tensors the segment's first forward would have
	// saved: the recompute stops after as many (earlyStop).
	saves int
}

// earlyStop is torch.utils.checkpoint's early stop (use_reentrant=False,
// on by default): the recompute's pack hook raises _StopRecomputationError
// once it has saved as many tensors as the first forward, so the op making
// the last save has allocated its outputs and nothing after it runs
// (docs/pytorch-memory.md §4). The ops after it are simulated as no-ops:
// their allocations are placeholders that take no memory and they save
// nothing, but their nodes are recorded, so gradients still flow through
// them (the segment's last residual add).
type earlyStop struct {
	counted int  // saves counted: in a first forward, or in a recompute
	limit   int  // the recompute's ckpt.saves; 0 outside a recompute
	stopped bool // the limit was reached
}

// recompute runs a checkpointed segment's forward again, saving this time,
// then its backward (torch.utils.checkpoint, use_reentrant=False).
func (s *sim) recompute(n *node) {
	x, out := n.saved[0], n.outs[0]
	if out.grad == nil {
		s.release(n)
		return
	}
	// The recompute enters its own autocast region on the backward thread.
	// Autocast's weight-cast cache is one per process (PyTorch 2.11,
	// autocast_mode.cpp) and its nesting count one per thread, so the
	// recompute finds casts an enclosing forward region cached, and
	// leaving its region clears them all.
	outer := s.tape
	s.tape = s.subTape()
	stop := s.stop
	s.stop = earlyStop{limit: n.ckpt.saves}
	r := s.ckptForward(n.ckpt, x)
	s.stop = stop
	s.clearCache()
	own := s.tape
	sub := own
	if s.recomputed != nil {
		sub = s.recomputed(sub)
	}
	s.tape = outer
	r.grad, out.grad = out.grad, nil
	s.unref(r)
	s.backward(sub)
	s.spareTapes = append(s.spareTapes, own[:0])
	if r.grad != nil {
		s.unref(r.grad)
		r.grad = nil
	}
	s.release(n)
}

func (s *sim) ckptForward(c *ckpt, x *tensor) *tensor {
	saving := s.saving
	s.saving = true
	out := c.run(x)
	s.saving = saving
	return out
}

package estimate

// torch.utils.checkpoint (use_reentrant=False): a segment's recompute in
// backward, and its early stop (docs/pytorch-memory.md §4). The first
// forward is sim.checkpointed (driver.go).

type ckpt struct {
	run func(x *tensor) *tensor
	// saves counts the tensors the segment's first forward would have
	// saved: the recompute stops after as many (earlyStop).
	saves int
	// tail are the gradients the backward of the segment's ops after its
	// last save allocates, in order (tailGrads).
	tail []gradShape
	// masks are the attention masks the segment's layers take as inputs
	// (segmentMasks), which its frame keeps for the recompute.
	masks [2]*tensor
	// rope are the rotary tables the model's forward made (sim.ropeT,
	// under cfg.modelRope), which transformers hands every decoder layer
	// (position_embeddings): the frame keeps them for the recompute, and
	// the last frame to die frees them, with the masks (measured: Llama 4's
	// 2 MiB table freed beside the sliding mask in each micro-batch's
	// backward, bench/results/2026-11-28-h200x2-heldout-53 c3; the
	// thirty-sixth session).
	rope [4]*tensor
	// tailUnit is the nested FSDP2 unit (a block's experts) whose output
	// the tail's backward reaches before the recompute, or 0 (tailUnit).
	tailUnit int16
}

// gradShape is a gradient's size and dtype; inner marks a tail gradient
// that another node of the tail consumes (tailGrads); temp is the bytes
// of the temporary the node's backward takes before the gradient and
// frees after it (node.bwdTemp), or 0.
type gradShape struct {
	elems, dt int64
	inner     bool
	temp      int64
}

// tailUnit is the nested FSDP2 unit (a block's experts, fsdpUnit.parent)
// whose output the backward of a segment's tail (seg[tail:], the nodes
// after its last save) reaches, or 0: a tail node of that unit, or one
// taking a tensor a node of it made. The engine runs the tail's backward
// before the recompute (tailGrads), so the gradient of the unit's output
// is ready first, and FSDP2's pre-backward hook on it unshards the unit
// then: its prefetched all-gather is copied out and freed, and the next
// unit's is prefetched, before the recompute allocates anything
// (measured: GPT-OSS's experts under expert, tensor and data parallelism,
// whose expert-parallel forward ends in a sum and a cast that save
// nothing; bench/results/2026-11-27-h200x4-tp-hf-sp/
// gptoss-tp2dp2ep2-rank0.json.gz).
func (s *sim) tailUnit(seg []*node, tail int) int16 {
	if !s.perParam || tail >= len(seg) {
		return 0
	}
	nested := func(k int16) bool { return k > 0 && int(k) < len(s.units) && s.units[k].parent != nil }
	for _, n := range seg[tail:] {
		if nested(n.unit) {
			return n.unit
		}
		for _, in := range n.ins {
			for _, m := range seg[:tail] {
				if nested(m.unit) && madeBy([]*node{m}, in) {
					return m.unit
				}
			}
		}
	}
	return 0
}

// tailGrads lists the gradients the backward of a segment's tail (the
// nodes recorded after its last save, in a first forward) allocates. The
// engine runs the first forward's own nodes: those that save nothing run
// their backward before the first node that unpacks a saved tensor
// starts the recompute (torch/utils/checkpoint.py, use_reentrant=False),
// so their gradients exist before the recompute allocates anything; in a
// residual block under autocast, the half-precision branch output's
// gradient, cast down from the fp32 stream's (measured: ViT-B/16,
// bench/results/2026-11-23-h100-traces2/vit-ckpt). The simulator records
// the tail again in the recompute and runs it first in backward, so
// recompute allocates these before the recompute and runNode hands them
// to the tail's nodes. A node's backward temporary (bwdTemp) of a node
// with one gradient to make is taken before that gradient and freed after
// it there too (measured: GPT-OSS's experts under tensor and sequence
// parallelism, whose forward ends in a sum over the top k and a
// reduce-scatter: the scatter's backward all-gathers the gradient through
// a buffer and the sum's backward makes the 360 MiB gradient of the
// routed rows, all before the recompute;
// bench/results/2026-11-28-h100x4-tp-gaps-traces). A tail whose backward
// takes anything else (workspaces, several temporaries) is left as it
// is: nil.
func tailGrads(tail []*node) []gradShape {
	var out []gradShape
	for i := len(tail) - 1; i >= 0; i-- {
		n := tail[i]
		if n.ckpt != nil || n.tempHeld || n.pairTemps > 0 || n.gemm || n.reduceTemp > 0 || n.gradWS != nil || n.ring != nil || n.sumsBroadcast() || len(n.outs) == 0 {
			return nil
		}
		g0 := n.outs[0]
		made := len(out)
		for j, in := range n.ins {
			if !n.passes(g0, j, in) {
				out = append(out, gradShape{elems: in.elems, dt: in.dt, inner: consumedIn(tail[:i], in)})
			}
		}
		if n.bwdTemp > 0 {
			if len(out)-made != 1 {
				return nil
			}
			out[made].temp = n.bwdTemp
		}
	}
	return out
}

// consumedIn says whether t's gradient dies in the backward of one of
// nodes: one of them made t and makes gradients of its own from it. A
// node that hands its incoming gradient on as an input's (node.passes)
// keeps it alive as that input's gradient: Llama 4's out.add_(routed), the
// shared expert's output taking the gradient of the block's output, which
// lives until the shared expert's backward (measured: 16 MiB held through
// the recompute of each checkpointed MoE block, Llama 4's test shape in a
// two-stage pipeline, bench/results/2026-11-28-h200x2-heldout-53 c3; the
// thirty-sixth session).
func consumedIn(nodes []*node, t *tensor) bool {
	for _, n := range nodes {
		for _, o := range n.outs {
			if o != t {
				continue
			}
			for j, in := range n.ins {
				if n.passes(t, j, in) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// madeBy says whether one of nodes made t.
func madeBy(nodes []*node, t *tensor) bool {
	for _, n := range nodes {
		for _, o := range n.outs {
			if o == t {
				return true
			}
		}
	}
	return false
}

// tailBefore allocates a checkpointed segment's tail gradients (ckpt.tail)
// before its recompute, as the engine makes them: a gradient another tail
// node consumes is freed once the next one exists, that node having run
// (measured: Gemma-2-2B in AMP, where the residual add's half gradient,
// cast down from the fp32 stream's, goes as soon as the norm's type_as
// backward has made its fp32 gradient, before the recompute starts;
// bench/results/2026-11-27-heldout22-traces). The consumed ones are
// handed to the simulated tail as placeholders (no memory).
func (s *sim) tailBefore(tail []gradShape) {
	var done *tensor
	for _, g := range tail {
		var tmp *tensor
		if g.temp > 0 {
			// The node's own temporary, taken again by none (preTemps).
			tmp = s.alloc(g.temp, 1, catTemp, "segment tail backward temp")
			s.preTemps = append(s.preTemps, g.temp)
		}
		t := s.alloc(g.elems, g.dt, catTemp, "segment tail")
		s.unref(tmp)
		t.prefix = "grad of "
		if done != nil {
			s.unref(done)
			done = nil
		}
		if g.inner {
			done = t
			t = s.unmade(g.elems, g.dt, catTemp, "segment tail")
			t.prefix = "grad of "
		}
		s.preGrads = append(s.preGrads, t)
	}
	s.unref(done)
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
	tape    int  // the tape's length at the first forward's last save
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
	if k := n.ckpt.tailUnit; k > 0 && !s.units[k].backward {
		// The tail reaches the nested unit first (ckpt.tailUnit); the
		// backward is still the block's until it reaches the unit's
		// nodes (fsdpBackwardAt), whose pre-backward then finds it
		// unsharded.
		s.preBackward(s.units[k])
	}
	s.tailBefore(n.ckpt.tail)
	stop := s.stop
	s.stop = earlyStop{limit: n.ckpt.saves}
	was := s.recomputing
	s.recomputing = true
	m0, m1, rope := s.mask, s.mask2, s.ropeT
	s.mask, s.mask2 = n.ckpt.masks[0], n.ckpt.masks[1]
	if s.cfg.modelRope {
		s.ropeT = n.ckpt.rope
	}
	r := s.ckptForward(n.ckpt, x)
	s.waitAll()
	s.mask, s.mask2, s.ropeT = m0, m1, rope
	s.recomputing = was
	s.stop = stop
	s.clearCache()
	own := s.tape
	// torch.utils.checkpoint (use_reentrant=False): a node's unpack hook
	// takes the recomputed tensor out of the frame, so the node's backward
	// holds the only reference and it dies when that returns, before the
	// engine reduces broadcast gradients (a bias's column sum) and before
	// release_variables (docs/pytorch-memory.md §4).
	for _, m := range own {
		m.early = true
	}
	// The frame keeps the segment's inputs for the recompute, and the
	// recomputed nodes' saved-tensor holders keep the frame: it dies, and
	// the input with it, when the last of those nodes to run its backward
	// releases its saved tensors (the first recorded that saves any),
	// before the engine runs the nodes that follow it (measured: the
	// checkpointed GroupNorm CNN frees each block's input before the
	// input cast's backward allocates its gradient;
	// bench/results/2026-11-23-h100-traces/cnn-gn).
	for _, m := range own {
		if len(m.saved) > 0 {
			m.frameEnd = n
			break
		}
	}
	sub := own
	if s.recomputed != nil {
		sub = s.recomputed(sub)
	}
	s.tape = outer
	r.grad, out.grad = out.grad, nil
	s.unref(r)
	s.backward(sub)
	for _, t := range s.preGrads {
		s.unref(t) // not taken (a tail that changed): dropped
	}
	s.preGrads, s.preTemps = s.preGrads[:0], s.preTemps[:0]
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

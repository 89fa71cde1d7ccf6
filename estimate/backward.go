package estimate

// Backward: the autograd engine's run over the recorded nodes, in the
// order PyTorch's engine and generated code allocate and free
// (docs/pytorch-memory.md §4).

// passes says whether node n hands its incoming gradient g to input i,
// in, as it is (node.pass, the same size and dtype, and not a
// subtraction's subtrahend: node.negFirst).
func (n *node) passes(g *tensor, i int, in *tensor) bool {
	return n.pass && len(n.outs) == 1 && g.elems == in.elems && g.dt == in.dt && !(i == 0 && n.negFirst)
}

// backward runs the tape in reverse creation order, which is the order
// autograd's ready queue takes for these graphs.
func (s *sim) backward(tape []*node) {
	for i := len(tape) - 1; i >= 0; i-- {
		if s.perParam && tape[i].unit != s.bwdUnit {
			s.fsdpBackwardAt(tape[i].unit) // fsdp.go
		}
		s.runNode(tape[i])
	}
}

func (s *sim) runNode(n *node) {
	if n.ckpt != nil {
		s.recompute(n)
		return
	}
	var g0 *tensor
	for _, o := range n.outs {
		if o.grad != nil {
			g0 = o.grad
			break
		}
	}
	if g0 == nil {
		s.release(n)
		s.endFrame(n)
		return
	}
	if n.copyIn {
		c := s.alloc(g0.elems, g0.dt, catTemp, n.outs[0].name)
		c.prefix = "copy of the grad of "
		for _, o := range n.outs {
			if o.grad == g0 {
				o.grad = c
			}
		}
		s.unref(g0)
		g0 = c
	}
	var tmp, dyc *tensor
	if n.dyFirst && n.outs[0].gradPerm {
		dyc = s.nodeTemp(n, g0.bytes(), catTemp, " backward copy of the gradient")
	}
	switch {
	case n.bwdTemp > 0 && len(s.preTemps) > 0 && s.preTemps[0] == n.bwdTemp:
		s.preTemps = s.preTemps[1:] // taken and freed before a recompute (tailBefore)
	case n.bwdTemp > 0:
		tmp = s.nodeTemp(n, n.bwdTemp, catTemp, " backward temp")
	}
	ringLate := s.ringBackward(n) // nil but for ring attention
	var pair [2]*tensor
	if n.pairTemps > 0 {
		for i := range pair {
			pair[i] = s.nodeTemp(n, n.pairTemps, catTemp, " backward pair temp")
		}
		if n.pairFirstDies {
			s.unref(pair[0])
			pair[0] = nil
		}
	}
	grads, full, cast := s.nodeGrads(n, g0, &dyc)
	var dcopy *tensor
	if n.dyCopy && n.outs[0].gradPerm {
		dcopy = s.nodeTemp(n, g0.bytes(), catTemp, " backward copy of the gradient")
	}
	s.partialSums(n)
	s.unrefAll(ringLate)
	s.unref(dcopy)
	s.unref(dyc)
	s.unref(pair[1])
	s.unref(pair[0])
	if n.early && !n.fnTemp {
		s.release(n)
	}
	if n.reduceTemp > 0 {
		s.unref(s.nodeTemp(n, n.reduceTemp, catTemp, " reduction scratch"))
	}
	if n.early && n.fnTemp {
		s.release(n) // measured: Gemma-2-2B eager, checkpointed (softmax)
	}
	cast = s.validateProduct(n, full[:], grads, g0, cast)
	if !n.tempHeld {
		s.unref(tmp)
		tmp = nil
	}
	s.finishNode(n, grads, cast)
	s.unref(tmp)
}

// partialSums runs a two-pass column reduction's second pass (node.partials):
// the partial sums of each gradient, each summed down with its scratch,
// then the partial sums freed, the last made first, as the kernel's locals
// go (the tensors the node's backward made before them, such as its
// contiguous copy of the incoming gradient, outlive them).
func (s *sim) partialSums(n *node) {
	p := n.partials
	if p == nil {
		return
	}
	var parts [2]*tensor
	for i := range parts[:p.count] {
		parts[i] = s.nodeTemp(n, p.rows*p.cols*p.dt, catTemp, " partial sums")
	}
	for range parts[:p.count] {
		if b := s.columnSumScratch(p.rows, p.cols, p.dt); b > 0 {
			s.unref(s.nodeTemp(n, b, catTemp, " partial sums' reduction scratch"))
		}
	}
	s.unref(parts[1])
	s.unref(parts[0])
}

// nodeGrads allocates node n's gradients for its inputs, in the order
// the generated code computes them, with the workspaces their products
// take; a broadcast input's comes back at the output's size in full, to
// be summed down (sumBroadcast). A convolution's copy of its strided
// gradient (*dyc) dies before its bias's gradient (inputWS.sum).
//
// A product's gradient for an input of another dtype than the output's
// (a bf16 factor of an fp32 product under autocast) is computed in the
// output's dtype (mul_tensor_backward: grad * other) and cast by
// validate_outputs (finishNode); bit i of cast marks input i's.
func (s *sim) nodeGrads(n *node, g0 *tensor, dyc **tensor) (grads []*tensor, full [2]*tensor, cast uint32) {
	grads = s.scratch[:0]
	for range n.ins {
		grads = append(grads, nil)
	}
	for i, in := range n.ins {
		ws := n.wsFor(in)
		if ws.sum {
			s.unref(*dyc)
			*dyc = nil
		}
		switch {
		case n.passes(g0, i, in):
			grads[i] = s.ref(g0)
		case n.split:
			grads[i] = s.view(g0, in.elems)
			if in.dt != g0.dt && i < 32 {
				cast |= 1 << i // validate_outputs casts the narrowed view
			}
		case n.bcast && in.elems < g0.elems && i < len(full):
			full[i] = s.alloc(g0.elems, g0.dt, catTemp, in.name)
			full[i].prefix = "unreduced grad of "
		case len(s.preGrads) > 0 && s.preGrads[0].elems == in.elems && s.preGrads[0].dt == in.dt:
			grads[i], s.preGrads = s.preGrads[0], s.preGrads[1:] // allocated before a recompute
		case n.sumsTo && s.cfg.bwdAutocast && g0.dt != f32 && i < 32:
			// sum_to under autocast: an fp32 sum, cast back
			// (config.bwdAutocast).
			grads[i] = s.alloc(in.elems, f32, catTemp, in.name)
			grads[i].prefix = "uncast grad of "
			cast |= 1 << i
		case n.bcast && in.dt != g0.dt && i < 32:
			grads[i] = s.alloc(in.elems, g0.dt, catTemp, in.name)
			grads[i].prefix = "uncast grad of "
			cast |= 1 << i
		default:
			grads[i] = s.alloc(in.elems, in.dt, catTemp, in.name)
			grads[i].prefix = "grad of "
		}
		if i == 0 && n.gemm {
			s.gemm(s.cfg.compute, false) // after the first product's output
		}
		if n.gemm && grads[i] != nil && (in.param || n.viewGrad) {
			grads[i].product = true
		}
		cat, label := catWorkspace, " backward workspace"
		if ws.sum {
			cat, label = catTemp, " bias reduction scratch"
			if n.outs[0].gradPerm {
				ws.bytes = s.columnSumScratch(g0.elems/in.elems, in.elems, g0.dt)
			}
		}
		if ws.bytes > 0 {
			s.unref(s.nodeTemp(n, ws.bytes, cat, label))
		}
	}
	return grads, full, cast
}

// finishNode is what the engine does after node n's function
// (torch/csrc/autograd/engine.cpp): call_function's validate_outputs casts
// a gradient computed in another dtype (nodeGrads' cast), call_function
// returns and drops the incoming gradients, evaluate_function then
// releases the saved variables, and only then are the outputs added into
// the next nodes' input buffers (measured: the tiny MoE in AMP, whose
// Qwen3 norm weight product casts its input's gradient before its saved
// cast input goes, bench/results/2026-11-23-h100-traces/moe-amp; GPT-2 XL's
// tied embedding, whose incoming gradient is freed before the sum of its
// weight's two gradients is allocated).
func (s *sim) finishNode(n *node, grads []*tensor, cast uint32) {
	s.castGrads(n, grads, cast)
	for _, o := range n.outs {
		if o.grad != nil {
			s.unref(o.grad)
			o.grad = nil
		}
	}
	s.release(n)
	s.endFrame(n)
	if n.unitEntry && s.perParam {
		s.fsdpLeaveNested(n.unit) // fsdp.go
	}
	for i, in := range n.ins {
		s.accumulate(in, grads[i])
	}
	if s.ddp != nil {
		s.ddpReady(n) // ddp.go
	}
	s.scratch = grads[:0]
}

// castGrads is validate_outputs' casts of node n's gradients computed in
// another dtype than their inputs' (bit i of cast marks input i's), each
// cast made before the uncast one is freed.
func (s *sim) castGrads(n *node, grads []*tensor, cast uint32) {
	for i := range n.ins {
		if cast&(1<<i) != 0 {
			s.castGrad(n, grads, i)
		}
	}
}

func (s *sim) castGrad(n *node, grads []*tensor, i int) {
	in := n.ins[i]
	c := s.alloc(in.elems, in.dt, catTemp, in.name)
	c.prefix = "grad of "
	s.unref(grads[i])
	grads[i] = c
}

// sumsBroadcast says whether node n is a product one of whose inputs is
// broadcast: its backward makes that gradient at the output's size, a
// temporary, and sums it down (validateProduct).
func (n *node) sumsBroadcast() bool {
	if !n.bcast || len(n.outs) == 0 {
		return false
	}
	for _, in := range n.ins {
		if in.elems < n.outs[0].elems {
			return true
		}
	}
	return false
}

// validateProduct is validate_outputs over a product's gradients
// (node.bcast): input by input in the op's order (self, then other: the
// reverse of the sorted-name order such nodes record their inputs in), a
// broadcast input's full-size gradient summed to size (the reduced
// gradient, the reduction's scratch, then the full one freed) and a
// gradient computed in another dtype cast (measured: the MoE rows'
// fp32 gradient cast before the routing weights' is summed,
// bench/results/2026-11-27-h200-deepseek-traces). A parameter broadcast
// over the rows (RMSNorm's weight, or Gemma's 1 + weight,
// tensor.rowVec) is a column sum, with the scratch columnSumScratch
// gives; a per-row factor (RMSNorm's rsqrt) sums each row in one block,
// with none (measured: Llama-3.2-1B,
// bench/results/2026-11-23-h100-traces/llama1b-eager). It returns the
// cast bits left for finishNode: every one of a node that is not a
// product.
func (s *sim) validateProduct(n *node, full, grads []*tensor, g0 *tensor, cast uint32) uint32 {
	if !n.bcast {
		return cast
	}
	for i := len(n.ins) - 1; i >= 0; i-- {
		if i < len(full) && full[i] != nil {
			in := n.ins[i]
			grads[i] = s.alloc(in.elems, in.dt, catTemp, in.name)
			grads[i].prefix = "grad of "
			if in.isRowVec() {
				if b := s.columnSumScratch(g0.elems/in.elems, in.elems, g0.dt); b > 0 {
					s.unref(s.alloc(b, u8, catTemp, "sum_to scratch"))
				}
			}
			s.unref(full[i])
			full[i] = nil
		}
		if cast&(1<<i) != 0 {
			cast &^= 1 << i
			s.castGrad(n, grads, i)
		}
	}
	return cast
}

// nodeTemp allocates bytes that node n's backward takes for itself,
// labelled with the node's name.
func (s *sim) nodeTemp(n *node, bytes int64, cat category, label string) *tensor {
	t := s.alloc(bytes, u8, cat, label)
	t.prefix = n.name
	return t
}

// endFrame releases the checkpoint whose frame n's saved tensors were the
// last to hold (node.frameEnd).
func (s *sim) endFrame(n *node) {
	if c := n.frameEnd; c != nil {
		n.frameEnd = nil
		s.release(c)
	}
}

// wsFor is the workspace taken after the gradient of input t, or the zero
// inputWS.
func (n *node) wsFor(t *tensor) inputWS {
	if n.gradWS != nil {
		for _, w := range n.gradWS {
			if w.t == t {
				return w
			}
		}
	}
	return inputWS{}
}

// unrefAll drops a reference to each of ts, in order.
func (s *sim) unrefAll(ts []*tensor) {
	for _, t := range ts {
		s.unref(t)
	}
}

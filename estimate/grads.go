package estimate

// accumulate adds g to t's gradient. A parameter whose .grad is None steals
// the buffer (AccumulateGrad); otherwise the sum is made in place and g is
// dropped. Views pass their gradient to the base's producer unchanged.
func (s *sim) accumulate(t, g *tensor) {
	if t.param && s.cfg.zero >= 2 && !s.noSync {
		s.reduceScatter(t, g)
		return
	}
	if t.param {
		if t.pgrad == nil {
			if b := s.ddpBucket(t); b != nil {
				// gradient_as_bucket_view: AccumulateGrad copies into the
				// parameter's bucket slice, which becomes its .grad.
				t.pgrad = s.view(b, t.bytes())
				s.unref(g)
				return
			}
			t.pgrad = g
			g.fixed = catGrad
			g.pass = s.passes
			s.recat(g)
			return
		}
		if t.pgrad.pass == s.passes && (t.pgrad.product || s.dtensor) {
			s.sumTied(t, g)
			return
		}
		s.unref(g)
		return
	}
	if t.grad == nil {
		t.grad = g
		return
	}
	// InputBuffer::accumulate (torch/csrc/autograd/input_buffer.cpp) adds
	// in place into whichever addend it holds the last reference to, the
	// first if it can; a gradient still shared (a pass-through) or a view
	// (a linear layer's input gradient, reshaped from the product's matrix)
	// cannot be, and when neither can the sum is a new tensor (measured:
	// the tiny MoE in bf16, whose key and value projections' input
	// gradients sum out of place, bench/results/moe-traces/moe-bf16-ckpt).
	// A DTensor's gradients are always summed out of place: the engine adds
	// in place only into a plain tensor, not a subclass (measured: the
	// sequence-parallel norms and gathered module inputs of held-out set
	// 64's history, docs/parallelism.md §3.1.9).
	switch old := t.grad; {
	case t.dtAct:
		t.grad = s.gradSum(t, old, g, catTemp)
	case stealable(old):
		s.unref(g)
	case stealable(g):
		s.unref(old)
		t.grad = g
	default:
		t.grad = s.gradSum(t, old, g, catTemp)
	}
}

// stealable reports whether the engine may add into gradient g in place:
// nothing else holds it and it is not a view.
func stealable(g *tensor) bool {
	return g.refs == 1 && g.base == nil && !g.product
}

// sumTied adds a second gradient a parameter receives in the same backward
// pass (a weight tied to two modules, such as BERT's embedding and its
// decoder). The engine sums both in the parameter's input buffer before
// AccumulateGrad runs (input_buffer.cpp), in place into the first only
// when nothing else holds it. Measured (docs/pytorch-memory.md §4): when
// the first came straight from a matrix product's backward (the
// decoder's weight in full precision) the sum is a new tensor and both
// are freed (BERT fp32); when it came through autocast's cast it is
// summed in place (GPT-2 in AMP), which accumulate does by dropping g. A
// DTensor's (tensor parallelism, sim.dtensor) is always a new tensor
// (measured on 4 × H200: Llama-3.2-1B's tied embedding at t = 4,
// bench/results/2026-11-26-h200x4-tp4ckpt-trace.jsonl).
func (s *sim) sumTied(t, g *tensor) {
	t.pgrad = s.gradSum(t, t.pgrad, g, catGrad)
	t.pgrad.pass = s.passes
}

// gradSum is the engine's out-of-place sum of weight t's two gradients a
// and g: a new tensor in category cat, both addends freed. An activation's
// sum (cat catTemp) is made the same way.
func (s *sim) gradSum(t, a, g *tensor, cat category) *tensor {
	sum := s.alloc(g.elems, g.dt, cat, t.name)
	sum.prefix = "grad sum of "
	s.unref(a)
	s.unref(g)
	return sum
}

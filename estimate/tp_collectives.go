package estimate

import "github.com/memplan/memplan/model"

// DTensor's collectives between a tensor-parallel rank's modules
// (model.Collective, docs/parallelism.md §3.1): the module's input
// gathered or wrapped, its partial output reduced, and what the module's
// call holds meanwhile.

type collectiveOp struct{ k *model.Collective }

func (o collectiveOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	y := o.run(s, x)
	if o.k.Opens {
		s.tpModule = true // the module's locals go after its output collective (atReturn)
	}
	if o.k.Holds {
		s.bodyHold = append(s.bodyHold, s.ref(y)) // dropBodyHold
	}
	if o.k.OutDropout > 0 {
		// The module's own dropout on what the collective left, before
		// the module returns (model.Collective.OutDropout).
		d := s.dropout(y)
		s.unref(y)
		y = d
	}
	if o.k.Opens && (o.k.Op == model.OpGatherSeq || o.k.Op == model.OpReplicate) {
		// The module's call holds the gathered (or wrapped) tensor and
		// the input it was handed until it returns, after its output
		// collective (closeModule; measured: the DeepSeek-V2-Lite and
		// moe-llama-wide sequence-parallel histories; without sequence
		// parallelism the DeepSeek-V2-Lite history and GPT-OSS's eight
		// layers at tp 4, whose output all-reduce has its output before
		// the attention's input goes, docs/parallelism.md §3.1.8).
		// Holding the input while the module's locals went before the
		// output collective had moved two GPT-OSS lines 4% under
		// (§3.1.4); the locals are held since (atReturn).
		s.moduleHold = append(s.moduleHold, s.ref(y), s.ref(x))
	}
	return y
}

// atReturn drops a module's local t as the module returns: at once, or
// inside a tensor-parallel module after its output collective, which runs
// in the module's call (RowwiseParallel's output hook; measured: Phi-3's
// and StarCoder2's attention free their rotated query, and Phi-3's MLP its
// product and gate, after the reduce-scatter,
// bench/results/2026-11-27-h200x2-tp-families, -h200x4-heldout-28).
func (s *sim) atReturn(t *tensor) {
	if s.tpModule {
		s.moduleHold = append(s.moduleHold, t)
		return
	}
	s.unref(t)
}

// dropGathered frees the gathered (or wrapped) tensor a module's opening
// collective holds, its first hold, as a call nested in the module returns
// (the vocabulary-parallel head's inside the causal LM's); the input the
// module was handed stays held until closeModule.
func (s *sim) dropGathered() {
	if len(s.moduleHold) > 0 {
		s.unref(s.moduleHold[0])
		s.moduleHold = append(s.moduleHold[:0], s.moduleHold[1:]...)
	}
}

// closeModule frees what the module whose output collective just ran
// held (collectiveOp.forward): the gathered tensor, then the input the
// module was handed, as its call returns.
func (s *sim) closeModule() {
	s.unrefAll(s.moduleHold)
	s.moduleHold = s.moduleHold[:0]
	s.tpModule = false
}

func (o collectiveOp) run(s *sim, x *tensor) *tensor {
	t := o.k.Ranks
	// A gather along the sequence (dim 1) of a batch of one is a view of
	// the collective's [t, s/t, …] output (torch._utils.
	// _maybe_view_chunk_cat: only size-1 dims lie before the gather dim);
	// a larger batch is chunked and concatenated anew.
	one := s.cfg.batch == 1
	switch o.k.Op {
	case model.OpGatherSeq:
		if o.k.Each && s.dtStream() {
			// hftp.py hands the module the gathered tensor's local part
			// (redistribute, then to_local), which each column-parallel
			// product wraps again (ColwiseParallel's input hook): each
			// product's share of the gradient is all-reduced into a new
			// tensor (fromLocalEach) and their sum is replicated, so the
			// gather's backward takes the rank's shard of it, a copy,
			// not a reduce-scatter (measured: Llama 4's test shape at tp 2
			// with sp, a redispatch copy after each of v_proj's, k_proj's
			// and q_proj's input gradients, then _select_split_tensor's
			// shard; bench/results/2026-11-28-h200x2-trace-74, trace74b).
			y := s.allGather(x, t, false, one)
			y.wrapped = true
			return y
		}
		y := s.allGather(x, t, true, one)
		// PrepareModuleInput keeps the gathered sequence a DTensor
		// (use_local_output=False) and the column-parallel products take
		// it as it is: their shares of its gradient are summed out of
		// place (measured: set 64's attention and MLP, the three and two
		// shares summed into new tensors before the reduce-scatter).
		y.dtAct = o.k.Each
		return y
	case model.OpReduceScatterSeq:
		// Partial → Shard(1): the chunks concatenated along dim 0, then
		// reduce_scatter_tensor's output. Backward all-gathers the
		// gradient: a [t·b, s/t, …] buffer, then the full gradient (the
		// buffer itself for a batch of one).
		c := s.alloc(x.elems, x.dt, catTemp, "reduce-scatter input (TP)")
		y := s.alloc(x.elems/t, x.dt, catTemp, "reduce-scatter output (TP)")
		y.dtAct = s.dtStream() // RowwiseParallel's use_local_output=False (hftp.py)
		s.unref(c)
		s.markUnwaited(y)
		if n := s.record("ReduceScatter", []*tensor{x}, y); n != nil && !one {
			n.bwdTemp = x.bytes()
		}
		return y
	case model.OpAllReduce:
		// Partial → Replicate: funcol.all_reduce clones, then reduces in
		// place. Backward is Replicate → Replicate: the gradient passes.
		y := s.alloc(x.elems, x.dt, catTemp, "all-reduce output (TP)")
		s.markUnwaited(y)
		if n := s.record("AllReduce", []*tensor{x}, y); n != nil {
			n.pass = true
		}
		return y
	}
	// OpReplicate: DTensor.from_local in forward; in backward the
	// gradient is a partial sum, all-reduced into a new tensor. Where the
	// module's products wrap the input each (Each), the wrapping and the
	// all-reduce are theirs (fromLocalEach) and this node passes the sum
	// of their gradients through.
	y := s.view(x, x.elems)
	n := s.record("FromLocal", []*tensor{x}, y)
	if o.k.Each {
		y.wrapped = true
		if n != nil {
			n.pass = true
		}
	}
	return y
}

// fromLocalEach is ColwiseParallel's input hook on one product of a module
// whose input x is wrapped by each product (model.Collective.Each): a
// DTensor.from_local view of x of its own, before autocast's casts, whose
// backward all-reduces the product's share of x's gradient into a new
// tensor that the autograd engine then adds into x's (measured: GPT-OSS's
// eight layers at tp 4 without sp, an out-of-place all-reduce after each
// of v_proj's, k_proj's and q_proj's input gradient, the first kept as the
// sum and the others added into it and freed,
// bench/results/2026-11-28-h100x4-tp-gaps-traces; docs/parallelism.md
// §3.1.8). The caller unrefs the view after the product.
func (s *sim) fromLocalEach(x *tensor) *tensor {
	v := s.view(x, x.elems)
	s.record("FromLocal", []*tensor{x}, v)
	return v
}

// allGather gathers t shards of x into a new tensor: the collective's
// output, then its chunks concatenated along the gather dim unless view
// (the output itself serves: collectiveOp.forward). seq says whether the
// gradient is a partial sum to reduce-scatter in backward (a sequence
// gather before ColwiseParallel), which concatenates the gradient's
// chunks first; a gather of the logits' vocabulary shards instead takes
// its shard of the replicated gradient (a clone).
func (s *sim) allGather(x *tensor, t int64, seq, view bool) *tensor {
	y := s.alloc(x.elems*t, x.dt, catTemp, "all-gather output (TP)")
	if !view {
		buf := y
		y = s.alloc(x.elems*t, x.dt, catTemp, "all-gather concatenation (TP)")
		s.unref(buf)
	}
	if n := s.record("AllGather", []*tensor{x}, y); n != nil && seq {
		n.bwdTemp = y.bytes()
	}
	return y
}

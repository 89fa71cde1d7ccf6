package estimate

// OLMo 2's whole-projection query and key norms under tensor parallelism,
// as OLMo-core's plan runs them (model.Attention.QKNormRanks,
// docs/parallelism.md §3.1.6): the rank's column shard of the projection,
// [rows, w/t], is exchanged all-to-all for the sequence shard of the whole
// width, [rows/t, w] (ColwiseParallel's output_layouts=Shard(1)), which
// the norm (SequenceParallel, the whole weight replicated) normalises, and
// exchanged back to [rows, w/t] (Shard(1) → Shard(2)) for the view into
// the rank's heads.

// qkNormTP is qkNorm over t's sequence shard of the whole width: t is the
// rank's [rows, w/r] projection, w the whole norm weight.
func (a *attnOp) qkNormTP(s *sim, t, w *tensor, rows int64) *tensor {
	r := a.k.QKNormRanks
	x := s.shardDimAllToAll(t, false)
	s.unref(t)
	y := s.rmsNormOf(x, w, rows/r, a.k.QKNormOffset, a.k.QKNormFP32)
	s.unref(x)
	z := s.shardDimAllToAll(y, true)
	s.unref(y)
	return z
}

// shardDimAllToAll is DTensor's redistribution between two shard
// dimensions of a [b, s, w] tensor x over its tensor-parallel ranks
// (torch.ops._dtensor.shard_dim_alltoall, c10d's Functional.cpp): the
// input viewed with the ranks' chunks as a new dimension moved first and
// made contiguous (a copy, but for a batch of one when the sequence is
// split off: the chunks are then the input's own rows), the all-to-all
// into a buffer of x's size, and that buffer with the ranks' dimension
// moved to the gather dimension and made contiguous (a copy, but for a
// batch of one when the sequence is gathered). toColumns says the
// sequence is gathered and the columns split (Shard(1) → Shard(2));
// otherwise the columns are gathered and the sequence split. Its backward
// is the other direction's exchange of the gradient.
func (s *sim) shardDimAllToAll(x *tensor, toColumns bool) *tensor {
	one := s.cfg.batch == 1
	var c *tensor
	if toColumns || !one {
		c = s.alloc(x.elems, x.dt, catTemp, "all-to-all input (TP)")
	}
	y := s.alloc(x.elems, x.dt, catTemp, "all-to-all output (TP)")
	s.unref(c)
	if !toColumns || !one {
		out := s.alloc(x.elems, x.dt, catTemp, "all-to-all result (TP)")
		s.unref(y)
		y = out
	}
	if n := s.record("AllToAll", []*tensor{x}, y); n != nil {
		// The gradient's exchange in the other direction: its input copy
		// and its buffer, beside the gradient it returns.
		n.bwdTemp = x.bytes()
		if !one {
			n.bwdTemp *= 2
		}
	}
	return y
}

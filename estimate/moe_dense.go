package estimate

// Llama 4's mixture of experts (model.MoE.Dense; modeling_llama4.py,
// transformers 5.17): Llama4TextMoe runs every token through every expert,
// each token's rows scaled by its router score (zero outside its top k),
// with two batched products over all the experts' fused weights, then
// sums the experts' outputs into the shared expert's output in place. Its
// activations grow with the number of experts, not with top_k: for E
// experts and T tokens it saves E·T rows of the hidden width twice and
// E·T rows of three times the expert width.

// llama4MoE is Llama4TextMoe.forward over rows tokens of x:
// router_scores, router_logits = router(x); routed_in =
// x.repeat(E, 1) * router_scores.transpose(0, 1).reshape(-1, 1) (the
// repeat and the scores' copy both saved by the product); routed_out =
// experts(routed_in); out = shared_expert(x); out.add_(routed_out.reshape(E,
// -1, h).sum(dim=0)). The locals (the scores, the scaled rows, the
// experts' output) go as it returns; the decoder layer binds the logits
// (hidden_states, _ = ...) until it returns.
func (s *sim) llama4MoE(o *moeOp, x *tensor, rows int64) *tensor {
	k := o.k
	e := k.Experts
	scores, logits := s.routeTopKSigmoid(o, x, rows)
	rep := s.alloc(e*rows*k.Dim, x.dt, catTemp, "routed_in (repeat)")
	s.record("Repeat", []*tensor{x}, rep)
	sc := s.alloc(e*rows, scores.dt, catTemp, "router_scores.T (copy)")
	s.record("Clone", []*tensor{scores}, sc) // reshape of a transposed view
	in := s.mul(rep, sc)
	s.unref(rep)
	s.unref(sc)
	var y *tensor
	s.inExpertsUnit(func() { y = s.denseExperts(o, in, e*rows) })
	sh := s.sharedExpert(x, &o.shared, rows, k.Shared, k.Dim, k.Activation)
	// Autocast runs sum in fp32 (its fp32_set_opt_dtype list: an fp32
	// result, no copy of the input), which add_ casts into sh.
	dt := y.dt
	if s.cfg.amp {
		dt = f32
	}
	sum := s.alloc(rows*k.Dim, dt, catTemp, "routed_out.sum(0)")
	// Its backward expands the gradient over the experts (a stride-0
	// view) that the reshape's backward copies: a gradient of y's size.
	s.record("SumExperts", []*tensor{y}, sum)
	out := s.view(sh, sh.elems) // out.add_(...): a new version of sh
	if n := s.record("Add", []*tensor{sh, sum}, out); n != nil {
		n.pass = true
	}
	s.unref(sh)
	s.unref(sum)
	for _, t := range []*tensor{scores, in, y} {
		s.unref(t)
	}
	if s.cfg.eager {
		s.returnScores(logits) // rebinds the decoder's _, the attention's weights
	} else {
		s.unitHold = append(s.unitHold, logits)
	}
	return out
}

// routeTopKSigmoid is Llama4Router over rows tokens: logits = x·Wᵀ (an
// nn.Linear), their top k (values and int64 ids), full_like(logits, −inf)
// with the values scattered in (in place; the node keeps the ids), the
// sigmoid of its fp32 copy (saved) cast back to the logits' dtype. It
// returns the scores and the logits; the top k go as it returns.
func (s *sim) routeTopKSigmoid(o *moeOp, x *tensor, rows int64) (scores, logits *tensor) {
	k := o.k
	logits = s.matmul(x, s.weight(o.pls[:], o.router), nil, rows, k.Experts)
	vals, idx := s.topk(logits, rows*k.TopK, logits.dt, "router_indices")
	full := s.alloc(rows*k.Experts, logits.dt, catTemp, "full_like(-inf)")
	sc := s.view(full, full.elems)
	if n := s.record("Scatter", []*tensor{full, vals}, sc); n != nil {
		s.save(n, idx)
	}
	s.unref(full)
	f := s.to(sc, f32)
	sg := s.unary("Sigmoid", f, false, true)
	s.unref(f)
	scores = s.to(sg, sc.dt)
	s.unref(sg)
	s.unref(sc) // the name is rebound to the scores
	s.unref(vals)
	s.unref(idx)
	return scores, logits
}

// denseExperts is Llama4TextExperts.forward over n = E·T rows x:
// gate_up = bmm(x.view(E, T, h), gate_up_proj) ([E, T, 2I]), chunked into
// gate and up (views), up · act(gate), then bmm with down_proj ([E, T,
// h]). Its locals (gate_up and its halves, saved by the activation and the
// product) go as it returns.
func (s *sim) denseExperts(o *moeOp, x *tensor, n int64) *tensor {
	k := o.k
	gu := s.bmm(x, s.weight(o.pls[:], o.gateUp), n, 2*k.Hidden)
	gate, up := s.view(gu, n*k.Hidden), s.view(gu, n*k.Hidden)
	s.record("Split", []*tensor{gu}, gate, up) // chunk(2, dim=-1)
	a := s.activation(k.Activation, gate, false)
	m := s.mul(up, a)
	s.unref(a)
	d := s.bmm(m, s.weight(o.pls[:], o.down), n, k.Dim)
	s.unref(m)
	for _, t := range []*tensor{gu, gate, up} {
		s.unref(t)
	}
	return d
}

// bmm is torch.bmm(x, w) over n rows of x against a batch of weights w,
// out columns each: autocast casts its arguments right to left (the
// weight's cast cached while it trains, matmulView), and its node
// (BmmBackward0, mat2 = w, self = x) saves and differentiates as a linear
// layer's product does (recordMm).
func (s *sim) bmm(x, w *tensor, n, out int64) *tensor {
	wc := s.castLow(w)
	xc := s.castLow(x)
	y := s.unmade(n*out, promote(xc.dt, wc.dt), catTemp, "bmm out")
	s.recordMm(xc, wc, y)
	s.make(y)
	s.gemm(y.dt, false)
	s.unref(xc)
	s.unref(wc)
	return y
}

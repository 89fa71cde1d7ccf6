package estimate

import "github.com/memplan/memplan/model"

// Mixtures of experts as transformers 5 runs them (docs/moe.md): a top-k
// router, then the experts' fused weights applied to every routed (token,
// slot) pair at once through torch's grouped GEMM (grouped_mm_experts_forward,
// the default experts implementation), not a Python loop over experts.

// moeOp is one sparse MoE block: the router, the experts' fused weights
// (gate_up_proj [E, 2I, h] and down_proj [E, h, I], with [E, 2I] and [E, h]
// biases when the experts have them) and the optional shared expert.
type moeOp struct {
	k              *model.MoE
	router         *tensor
	gateUp, down   *tensor
	gateUpB, downB *tensor
	shared         mlpParams // gate is nil without a shared expert
	sharedGate     *tensor
}

// newMoE allocates the block's parameters in the order transformers 5
// registers them: the router, the experts' two fused tensors, then the
// shared expert and its gate.
func newMoE(s *sim, l *model.Layer, _ map[string]*tensor) op {
	k := l.Spec.(*model.MoE)
	o := &moeOp{k: k, router: s.matrix(k.Experts, k.Dim, 1, "router.weight")}
	e := s.localExperts(k.Experts) // all of them without --ep
	o.gateUp = s.matrix(2*k.Hidden, k.Dim, e, "experts.gate_up_proj")
	o.gateUpB = s.optParam(k.Bias, e*2*k.Hidden, "experts.gate_up_proj_bias")
	o.down = s.matrix(k.Dim, k.Hidden, e, "experts.down_proj")
	o.downB = s.optParam(k.Bias, e*k.Dim, "experts.down_proj_bias")
	if k.Shared > 0 {
		o.shared = s.mlpParams(k.Dim, k.Shared, false, &sharedNames)
		if k.SharedGate {
			o.sharedGate = s.matrix(1, k.Dim, 1, "shared_expert_gate")
		}
	}
	return o
}

// forward is the sparse block: the shared expert first (Qwen2-MoE), the
// router, the grouped experts, then the gated shared output added in place.
func (o *moeOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	k, rows := o.k, s.rows(sh)
	var shared *tensor
	if k.Shared > 0 {
		shared = s.gatedMLP(x, &o.shared, rows, k.Shared, k.Dim, k.Activation)
	}
	w, idx := s.route(o, x, rows)
	var y *tensor
	if s.cfg.ep > 1 {
		y = s.expertsEP(o, x, w, idx, rows)
	} else {
		y = s.groupedExperts(o, x, w, idx, rows)
	}
	s.unref(w)
	s.unref(idx)
	if shared != nil {
		y = s.addShared(o, x, y, shared, rows)
	}
	return y
}

// route is the top-k router (Qwen2MoeTopKRouter, MixtralTopKRouter):
// logits = x·Wᵀ (bf16 under autocast), softmax in fp32, top-k. It returns
// the fp32 routing weights [rows, k] and the int64 expert ids [rows, k].
// The in-place renormalisation of the top-k weights (norm_topk_prob) keeps
// two [rows, k] fp32 tensors more in the small pool; it is left out.
func (s *sim) route(o *moeOp, x *tensor, rows int64) (w, idx *tensor) {
	k := o.k
	logits := s.matmul(x, o.router, nil, rows, k.Experts)
	l32 := s.to(logits, f32) // softmax(..., dtype=float) converts first
	s.unref(logits)
	probs := s.unary("Softmax", l32, false, true)
	s.unref(l32)
	w = s.alloc(rows*k.TopK, f32, catTemp, "top-k weights")
	idx = s.alloc(rows*k.TopK, i64, catTemp, "top-k experts")
	if n := s.record("Topk", []*tensor{probs}, w); n != nil {
		s.save(n, idx)
	}
	s.unref(probs)
	return w, idx
}

// groupedExperts is transformers' grouped_mm_experts_forward over the
// S = rows·k routed pairs: gather the rows (hidden_states[token_idx]),
// sort them by expert (argsort, then [perm]), two grouped GEMMs around the
// gated activation, scale by the routing weights, restore the order
// ([inv_perm]) and sum each token's k rows. Every intermediate is [S, ·],
// whatever the routing: the per-expert counts only set the groups'
// boundaries. torch's grouped GEMM is not autocast-enabled and the input
// is cast to the weights' dtype, so under autocast over fp32 weights the
// experts run in fp32 (through cuBLAS, group by group); bf16 weights take
// the fused CUTLASS kernel.
func (s *sim) groupedExperts(o *moeOp, x, w, idx *tensor, rows int64) *tensor {
	k := o.k
	n := rows * k.TopK
	ar := s.alloc(rows, i64, catTemp, "arange")
	tok := s.alloc(n, i64, catTemp, "token_idx") // expand(...).reshape(-1) copies
	s.unref(ar)
	sel := s.gatherRows(x, tok, n, k.Dim, "selected rows")
	vals := s.alloc(n, i64, catTemp, "sort values")
	perm := s.alloc(n, i64, catTemp, "perm") // argsort(expert_ids)
	s.unref(vals)
	inv := s.alloc(n, i64, catTemp, "inv_perm")
	ar = s.alloc(n, i64, catTemp, "arange")
	s.unref(ar) // inv_perm[perm] = arange(S)
	eg := s.alloc(n, i64, catTemp, "expert_ids_g")
	wg := s.gatherRows(w, perm, n, 1, "sample_weights_g")
	selg := s.gatherRows(sel, perm, n, k.Dim, "selected rows (sorted)")
	hi := s.alloc(n, 4, catTemp, "expert ids (int32)")
	tpe := s.alloc(k.Experts, 4, catTemp, "tokens_per_expert")
	offs := s.alloc(k.Experts, 4, catTemp, "offsets")
	gu := s.groupedLinear(selg, o.gateUp, o.gateUpB, eg, n, 2*k.Hidden)
	gate, up := s.view(gu, n*k.Hidden), s.view(gu, n*k.Hidden) // chunk(2)
	s.record("Split", []*tensor{gu}, gate, up)
	s.unref(gu)
	a := s.activation(k.Activation, gate, false)
	s.unref(gate)
	m := s.mul(a, up)
	s.unref(a)
	s.unref(up)
	out := s.groupedLinear(m, o.down, o.downB, eg, n, k.Dim)
	s.unref(m)
	sc := s.broadcastMul(out, wg)
	s.unref(out) // the name is rebound; the Mul node keeps it
	r, y := s.restoreAndSum(sc, inv, n, rows*k.Dim)
	// The function's locals go when it returns, in the order they were
	// first bound (gate_up_out and gated_out are saved for backward).
	for _, t := range []*tensor{tok, sel, perm, inv, eg, wg, selg, hi, tpe, offs, sc, r} {
		s.unref(t)
	}
	return y
}

// gatherRows is src[index] over n rows of width cols: a new tensor whose
// node saves only the index; its backward scatters into zeros of src's
// size with index_put_(accumulate=True), which sorts the indices (three
// int64 arrays of n).
func (s *sim) gatherRows(src, index *tensor, n, cols int64, name string) *tensor {
	y := s.alloc(n*cols, src.dt, catTemp, name)
	if nd := s.record("Index", []*tensor{src}, y); nd != nil {
		s.save(nd, index)
		nd.bwdTemp = 3 * n * i64
	}
	return y
}

// groupedLinear is transformers' _grouped_linear: _grouped_mm(input.to(W's
// dtype), Wᵀ, offs) [+ bias[expert_ids_g]]. Its node saves the (cast)
// input for W's gradient (W itself is a parameter); the backward's
// gradient of W comes out in W's layout and is kept as .grad as it is.
func (s *sim) groupedLinear(x, wt, b, eg *tensor, n, out int64) *tensor {
	xc := s.to(x, wt.dt)
	if wt.dt == f32 {
		s.gemm(f32, false) // the fp32 fallback: one cuBLAS GEMM per group
	}
	y := s.alloc(n*out, xc.dt, catTemp, "grouped_mm out")
	if nd := s.record("GroupedMM", []*tensor{xc, wt}, y); nd != nil {
		nd.gemm = wt.dt == f32
		s.save(nd, xc)
	}
	s.unref(xc)
	if b == nil {
		return y
	}
	bg := s.gatherRows(b, eg, n, out, "bias[expert_ids_g]")
	z := s.add(y, bg)
	s.unref(y)
	s.unref(bg)
	return z
}

// broadcastMul is out · weights.unsqueeze(-1): both are saved; the
// gradient of the [S, 1] weights is the [S, h] product grad·out summed to
// size, a transient of out's size.
func (s *sim) broadcastMul(big, small *tensor) *tensor {
	y := s.alloc(big.elems, promote(big.dt, small.dt), catTemp, "weighted out")
	if n := s.record("Mul", []*tensor{big, small}, y); n != nil {
		s.save(n, big, small)
		if small.req {
			n.bwdTemp = big.elems * y.dt
		}
	}
	return y
}

// restoreAndSum is out_per_sample_g[inv_perm] then
// .view(tokens, k, h).sum(dim=1): the reordered copy is transient, the sum
// is the block's output. In backward the sum expands the gradient to
// [tokens, k, h] (a view with stride 0 over k), which the view's backward
// must copy to reshape it to [S, h]; the index's backward then scatters
// that copy into zeros of [S, h]. The one node here stands for the three:
// its gradient is the zeros, the copy and the scatter's sorted indices are
// transients. It returns the reordered copy (the caller's local) and the
// sum.
func (s *sim) restoreAndSum(sc, inv *tensor, n, outElems int64) (r, y *tensor) {
	r = s.alloc(sc.elems, sc.dt, catTemp, "out_per_sample")
	y = s.alloc(outElems, sc.dt, catTemp, "moe out")
	if nd := s.record("IndexSum", []*tensor{sc}, y); nd != nil {
		s.save(nd, inv)
		nd.bwdTemp = sc.bytes() + 3*n*i64
	}
	return r, y
}

// addShared gates the shared expert's output with sigmoid(x·gᵀ) when the
// block has the gate, and adds it into y in place (expert_output +=).
func (s *sim) addShared(o *moeOp, x, y, sh *tensor, rows int64) *tensor {
	if o.sharedGate != nil {
		g := s.matmul(x, o.sharedGate, nil, rows, 1)
		sg := s.unary("Sigmoid", g, false, true)
		s.unref(g)
		m := s.mul(sg, sh)
		s.unref(sg)
		s.unref(sh)
		sh = m
	}
	next := s.view(y, y.elems)
	if n := s.record("AddInplace", []*tensor{y, sh}, next); n != nil {
		n.pass = true
	}
	s.unref(y)
	s.unref(sh)
	return next
}

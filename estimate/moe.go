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
	routerB        *tensor // GPT-OSS's router bias (model.RouterTopKSoftmax)
	gateUp, down   *tensor
	gateUpB, downB *tensor
	shared         mlpParams // gate is nil without a shared expert
	sharedGate     *tensor
	// pls are the ParamWrappers active on the router (0), gate_up_proj
	// (1) and down_proj (2) while their modules run (LoRA on fused
	// experts, lora_params.go).
	pls [3]*paramLoRA
}

// newMoE allocates the block's parameters in the order transformers 5
// registers them: the router, the experts' two fused tensors, then the
// shared expert and its gate; DeepseekV3MoE registers its experts before
// its router (gate), whose score-correction bias is a buffer.
func newMoE(s *sim, l *model.Layer, _ map[string]*tensor) op {
	k := l.Spec.(*model.MoE)
	o := &moeOp{k: k}
	expertsFirst := model.ExpertsFirst(k.Router)
	if !expertsFirst {
		o.router = s.matrix(k.Experts, k.Dim, 1, "router.weight")
		o.routerB = s.optParam(k.Router == model.RouterTopKSoftmax, k.Experts, "router.bias")
	}
	// The rank's experts (all of them without --ep); a whole load
	// (loadWhole) builds every expert before the rank keeps its own, as
	// ep.py's slices of a model built on the GPU do.
	e := s.localExperts(k.Experts)
	if s.wholeBuild {
		e = k.Experts
	}
	s.expertBuild = true
	o.gateUp = s.matrix(2*k.Hidden, k.Dim, e, "experts.gate_up_proj")
	o.gateUpB = s.optParam(k.Bias, e*2*k.Hidden, "experts.gate_up_proj_bias")
	o.down = s.matrix(k.Dim, k.Hidden, e, "experts.down_proj")
	o.downB = s.optParam(k.Bias, e*k.Dim, "experts.down_proj_bias")
	s.expertBuild = false
	if expertsFirst {
		o.router = s.matrix(k.Experts, k.Dim, 1, "gate.weight")
		if k.Router == model.RouterSigmoidGroup {
			s.buffer(k.Experts, s.cfg.param, "gate.e_score_correction_bias")
		}
	}
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
	if k.Dense {
		return s.llama4MoE(o, x, rows) // moe_dense.go
	}
	var shared *tensor
	if k.Shared > 0 && !k.SharedAfter {
		shared = s.sharedExpert(x, &o.shared, rows, k.Shared, k.Dim, k.Activation)
	}
	var w, idx, logits *tensor
	if fusedLoRA(o.router) {
		o.pls[0] = s.activateParamLoRA(o.router) // the gate module's wrapper
	}
	switch k.Router {
	case model.RouterTopKSoftmax:
		w, idx, logits = s.routeTopKFirst(o, x, rows)
	case model.RouterSigmoidGroup:
		w, idx, logits = s.routeSigmoidGroup(o, x, rows)
	case model.RouterSoftmaxGreedy, model.RouterSoftmaxGroup:
		w, idx, logits = s.routeSoftmax(o, x, rows)
	default:
		w, idx = s.route(o, x, rows)
	}
	s.deactivate(o.pls[0])
	o.pls[0] = nil
	var y *tensor
	experts := func() {
		// The experts' wrappers nest: down_proj's outside gate_up_proj's.
		if fusedLoRA(o.down) {
			o.pls[2] = s.activateParamLoRA(o.down)
		}
		if fusedLoRA(o.gateUp) {
			o.pls[1] = s.activateParamLoRA(o.gateUp)
		}
		if s.cfg.ep > 1 {
			y = s.expertsEP(o, x, w, idx, rows)
		} else {
			y = s.groupedExperts(o, x, w, idx, rows)
		}
		s.deactivate(o.pls[1]) // the inner wrapper exits first
		s.deactivate(o.pls[2])
		o.pls[1], o.pls[2] = nil, nil
	}
	s.inExpertsUnit(experts)
	if k.SharedAfter && k.Shared > 0 {
		// DeepseekV3MoE: hidden_states + self.shared_experts(residuals),
		// after the routed experts; the sum made, both go.
		sh := s.sharedExpert(x, &o.shared, rows, k.Shared, k.Dim, k.Activation)
		sum := s.add(y, sh)
		s.unref(y)
		s.unref(sh)
		y = sum
	}
	if k.Router == model.RouterTopKSoftmax {
		s.returnScores(w)
	} else {
		s.unref(w)
	}
	s.unref(idx)
	s.unref(logits)
	if shared != nil {
		y = s.addShared(o, x, y, shared, rows)
	}
	return y
}

// groupedExperts is transformers 5.17's grouped_mm_experts_forward over
// the S = rows·k routed pairs (its source, as it ran, is in
// bench/results/moe-traces/*/source.txt): sort the expert ids (values and
// permutation kept), gather the rows (hidden_states[perm // k]), mask the
// EP sentinel rows in place, two grouped GEMMs around the gated
// activation, each output masked out of place (the unmasked one is
// dropped), scale by the routing weights, restore the order ([inv_perm],
// the weighted rows dropped) and sum each token's k rows. Every
// intermediate is [S, ·], whatever the routing: the per-expert counts only
// set the groups' boundaries. torch's grouped GEMM is not autocast-enabled
// and the input is cast to the weights' dtype, so under autocast over fp32
// weights the experts run in fp32 (through cuBLAS, group by group); bf16
// weights take the fused CUTLASS kernel.
func (s *sim) groupedExperts(o *moeOp, x, w, idx *tensor, rows int64) *tensor {
	k := o.k
	n := rows * k.TopK
	eg, perm := s.sortExperts(n)
	pk := s.alloc(n, i64, catTemp, "perm // top_k")
	selg := s.gatherRows(x, pk, n, k.Dim, "selected rows (sorted)")
	s.unref(pk)
	wg := s.gatherRows(w, perm, n, 1, "sample_weights_g")
	hi, tpe, offs, mask := s.groupOffsets(n, k.Experts)
	// selected_biases = gate_up_proj_bias[expert_ids_g], before the
	// pre-mask.
	b1 := s.expertBias(o.gateUpB, eg, n, 2*k.Hidden)
	selm := s.maskInPlace(selg, mask)
	s.unref(selg)
	out, b2 := s.expertMLP(o, selm, mask, eg, n, b1)
	sc := s.broadcastMul(out, wg)
	r, inv := s.restore(sc, perm, n)
	s.unref(sc) // the name is rebound to the reordered rows
	y := s.sumTopK(r, rows*k.Dim, x.dt)
	// The function's locals go when it returns, in the order they were
	// first bound.
	// (selected_hidden_states_g, masked in place, is one of them: measured,
	// bench/results/2026-11-23-h100-traces2/moe-ckpt-amp.)
	for _, t := range []*tensor{eg, perm, selm, wg, hi, tpe, offs, mask, b2, out, inv, r} {
		s.unref(t)
	}
	return y
}

// expertBias is bias[expert_ids_g] over n rows of width, or nil for
// experts without biases.
func (s *sim) expertBias(b, eg *tensor, n, width int64) *tensor {
	if b == nil {
		return nil
	}
	return s.gatherRows(b, eg, n, width, "bias[expert_ids_g]")
}

// sortExperts is torch.sort(expert_ids): the sorted ids and the
// permutation, both kept, and the radix sort's scratch: a copy of the keys
// and CUB's temporary storage, about 2.2 bytes per key byte in the traces
// (283,135 bytes for 16,384 keys).
func (s *sim) sortExperts(n int64) (eg, perm *tensor) {
	eg = s.alloc(n, i64, catTemp, "expert_ids_g")
	perm = s.alloc(n, i64, catTemp, "perm")
	keys := s.alloc(n, i64, catTemp, "sort keys")
	s.unref(s.alloc(n*i64*22/10, u8, catTemp, "sort scratch (CUB)"))
	s.unref(keys)
	return eg, perm
}

// groupOffsets is histc over the sorted ids (as int32), its cumsum and the
// EP sentinel mask (expert_ids_g >= E, one byte per pair).
func (s *sim) groupOffsets(n, experts int64) (hi, tpe, offs, mask *tensor) {
	hi = s.alloc(n, 4, catTemp, "histc_input")
	tpe = s.alloc(experts, 4, catTemp, "tokens_per_expert")
	offs = s.alloc(experts, 4, catTemp, "offsets")
	mask = s.alloc(n, u8, catTemp, "sentinel_mask")
	return hi, tpe, offs, mask
}

// maskInPlace is x.masked_fill_(mask, 0): a new version of x's storage;
// its backward masks the gradient out of place.
func (s *sim) maskInPlace(x, mask *tensor) *tensor {
	y := s.view(x, x.elems)
	if n := s.record("MaskedFill", []*tensor{x}, y); n != nil {
		s.save(n, mask)
	}
	return y
}

// maskCopy is x.masked_fill(mask, 0): a new tensor; the node keeps the
// mask only.
func (s *sim) maskCopy(x, mask *tensor) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "masked")
	if n := s.record("MaskedFill", []*tensor{x}, y); n != nil {
		s.save(n, mask)
	}
	return y
}

// expertMLP is the experts' two grouped GEMMs around the gate over n
// sorted rows, each output masked: the [n, h] result. b1 is the gathered
// gate_up bias (expertBias; nil without biases), which the name
// selected_biases holds until the down projection's is gathered; that
// one, b2, is returned for the caller to free with its locals.
func (s *sim) expertMLP(o *moeOp, x, mask, eg *tensor, n int64, b1 *tensor) (d, b2 *tensor) {
	k := o.k
	gu0 := s.groupedLinear(x, s.weight(o.pls[:], o.gateUp), b1, n, 2*k.Hidden)
	gu := s.maskCopy(gu0, mask)
	s.unref(gu0)
	m := s.expertGate(o, gu, n)
	b2 = s.expertBias(o.downB, eg, n, k.Dim)
	s.unref(b1)
	d0 := s.groupedLinear(m, s.weight(o.pls[:], o.down), b2, n, k.Dim)
	s.unref(m)
	d = s.maskCopy(d0, mask)
	s.unref(d0)
	return d, b2
}

// expertGate is the experts' _apply_gate over gate_up's output gu [n, 2I]
// (consumed, as the caller's name is rebound to the result):
// transformers' default act(gate) · up over gu's two halves (chunk), or
// GPT-OSS's clamped gate (model.GateClamped) over its even and odd
// columns (two strided slices, whose backward each pads its gradient to
// gu's size): gate.clamp(max=7) and up.clamp(−7, 7), each a new tensor
// that saves its (sliced) input, so gu stays saved; glu = gate ·
// σ(1.702 · gate) (the scaled gate dropped once the sigmoid exists, which
// saves its output); (up + 1) · glu. clamp's backward makes where(self ≤
// max, grad, 0): one boolean mask of the input's size for the gate, two
// (≥ min, ≤ max) for up, before its gradient.
func (s *sim) expertGate(o *moeOp, gu *tensor, n int64) *tensor {
	k := o.k
	gate, up := s.view(gu, n*k.Hidden), s.view(gu, n*k.Hidden)
	if k.Gate != model.GateClamped {
		s.record("Split", []*tensor{gu}, gate, up) // chunk(2)
		s.unref(gu)
		a := s.activation(k.Activation, gate, false)
		s.unref(gate)
		m := s.mul(a, up)
		s.unref(a)
		s.unref(up)
		return m
	}
	s.record("Slice", []*tensor{gu}, gate) // gate_up[..., ::2]
	s.record("Slice", []*tensor{gu}, up)   // gate_up[..., 1::2]
	gc := s.clamp(gate, false)
	s.unref(gate)
	uc := s.clamp(up, true)
	s.unref(up)
	t := s.scalarOp(gc)
	sg := s.unary("Sigmoid", t, false, true)
	s.unref(t)
	glu := s.mul(gc, sg)
	s.unref(sg)
	u1 := s.addScalar(uc)
	m := s.mul(u1, glu)
	s.unref(u1)
	// _apply_gate's locals (gate, up, glu) go as it returns, then the
	// caller's name for gu.
	s.unref(gc)
	s.unref(uc)
	s.unref(glu)
	s.unref(gu)
	return m
}

// restore is inv_perm = empty_like(perm); inv_perm[perm] = arange(S);
// weighted_out[inv_perm]: the reordered rows and inv_perm.
func (s *sim) restore(sc, perm *tensor, n int64) (r, inv *tensor) {
	inv = s.alloc(n, i64, catTemp, "inv_perm")
	s.unref(s.alloc(n, i64, catTemp, "arange"))
	return s.gatherRows(sc, inv, n, sc.elems/n, "weighted_out (restored)"), inv
}

// gatherRows is src[index] over n rows of width cols: a new tensor whose
// node saves only the index; its backward scatters into zeros of src's
// size with index_put_(accumulate=True), which sorts the indices (three
// int64 arrays of n).
//
// The node saves the index before the gather runs (VariableType saves an
// op's inputs first), so a checkpoint's recompute that stops on that save
// never makes the output (matmulView; measured: the restore gather ends
// the tiny MoE's recompute, bench/results/moe-traces/moe-bf16-ckpt).
func (s *sim) gatherRows(src, index *tensor, n, cols int64, name string) *tensor {
	y := s.unmade(n*cols, src.dt, catTemp, name)
	if nd := s.record("Index", []*tensor{src}, y); nd != nil {
		s.save(nd, index)
		nd.bwdTemp = 3 * n * i64
	}
	s.make(y)
	return y
}

// clamp is x.clamp(max=c), or with both x.clamp(min=−c, max=c): a new
// tensor whose node saves x; clamp_backward (FunctionsManual.cpp) makes
// where(mask, grad, 0) over one boolean mask of x's size per bound, the
// masks alive until the gradient exists.
func (s *sim) clamp(x *tensor, both bool) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "clamp")
	if n := s.record("Clamp", []*tensor{x}, y); n != nil {
		s.save(n, x)
		if both {
			n.pairTemps = x.elems
		} else {
			n.bwdTemp = x.elems
		}
	}
	return y
}

// groupedLinear is transformers' _grouped_linear: _grouped_mm(input.to(W's
// dtype), Wᵀ, offs), then out.add_(b) in place when the experts have
// biases (b is the gathered bias, expertBias). Its node saves the (cast)
// input for W's gradient when W requires grad (W itself is a parameter;
// the generated code saves self only for mat2's gradient); the backward's
// gradient of W comes out in W's layout and is kept as .grad as it is.
// GroupedMmBackward0 names the input self and Wᵀ mat2 (derivatives.yaml)
// and, like every generated node, computes the gradients in sorted name
// order: W's first, then the input's (docs/moe.md §1,
// docs/pytorch-memory.md §4).
func (s *sim) groupedLinear(x, wt, b *tensor, n, out int64) *tensor {
	xc := s.to(x, wt.dt)
	y := s.alloc(n*out, xc.dt, catTemp, "grouped_mm out")
	if wt.dt == f32 {
		s.gemm(f32, false) // the fp32 fallback: one cuBLAS GEMM per group
	}
	if nd := s.record("GroupedMM", []*tensor{wt, xc}, y); nd != nil {
		nd.gemm = wt.dt == f32
		if wt.req {
			// Only W's gradient needs the input: frozen experts (LoRA)
			// save nothing (measured: GPT-OSS under LoRA, 2 × 90 MiB
			// per layer at 8,192 routed rows, bench/results/2026-11-27-h200-gptoss-lora.jsonl).
			s.save(nd, xc)
		}
		if !wt.param && xc.req {
			// A parametrized weight (LoRA on fused experts) lives only
			// as long as this node keeps it.
			s.save(nd, wt)
		}
	}
	s.unref(xc)
	if b == nil {
		return y
	}
	// add_ makes a new version of y's storage; AddBackward0 passes the
	// gradient to both.
	z := s.view(y, y.elems)
	if nd := s.record("Add", []*tensor{y, b}, z); nd != nil {
		nd.pass = true
	}
	s.unref(y)
	return z
}

// broadcastMul is out · weights.unsqueeze(-1): both are saved. In
// backward (MulBackward0 computes other's gradient before self's) the
// gradient of the [S, 1] weights is the [S, h] product grad·out, summed
// to size by validate_outputs; out's is grad·weights in the product's
// dtype, which validate_outputs casts to out's when the weights promoted
// it (DeepSeek-V3's fp32 weights over bf16 rows) before it sums the
// weights' (measured: Moonlight's and DeepSeek-V3's cuts, an fp32 [S, h]
// beside the weights' while the bf16 cast is made,
// bench/results/2026-11-27-h200-deepseek-traces).
func (s *sim) broadcastMul(big, small *tensor) *tensor {
	y := s.alloc(big.elems, promote(big.dt, small.dt), catTemp, "weighted out")
	if n := s.record("Mul", []*tensor{small, big}, y); n != nil {
		s.save(n, big, small)
		n.bcast = true
	}
	return y
}

// sumTopK is .view(tokens, k, h).sum(dim=1) of the restored rows r. Its
// backward expands the gradient to [tokens, k, h] (a view with stride 0
// over k), which the view's backward must copy to reshape it to [S, h]:
// the gradient of r, which the [inv_perm] gather's backward then scatters
// into zeros of [S, h].
// The sum goes back to the stream's dtype dt (.to(hidden_states.dtype)):
// a copy when fp32 routing weights (DeepSeek's, Mixtral's) made the weighted rows
// and their sum fp32 over a bf16 stream (measured: Moonlight's cut, a
// 16 MiB cast after the 32 MiB sum).
func (s *sim) sumTopK(r *tensor, outElems, dt int64) *tensor {
	y := s.alloc(outElems, r.dt, catTemp, "moe out")
	s.record("SumTopK", []*tensor{r}, y)
	if y.dt == dt {
		return y
	}
	c := s.to(y, dt)
	s.unref(y)
	return c
}

// addShared gates the shared expert's output with sigmoid(x·gᵀ) when the
// block has the gate, and adds it to y into a new tensor, freeing y and
// then the gated output (transformers 5.17's Qwen2MoeSparseMoeBlock:
// expert_output + shared_expert_output; measured in rank 0's allocator
// history of an expert-parallel run, bench/results/2026-11-26-h200x4-ep-fsdp-snapshots).
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
	sum := s.add(y, sh)
	s.unref(y)
	s.unref(sh)
	return sum
}

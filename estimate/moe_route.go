package estimate

// The routers of a mixture of experts (moeOp.forward picks one by
// model.MoE.Router) and what a block returns beside its output.

import "github.com/memplan/memplan/model"

// routeSigmoidGroup is DeepSeek-V3's DeepseekV3TopkRouter over rows
// tokens: logits = x.float()·W.float()ᵀ (fp32 copies of both in bf16;
// under autocast the linear casts them to bf16 as ever), scores =
// sigmoid(logits) (saved), scores + the correction bias, the best two
// scores of each of the G groups summed, the best TopGroups groups (their
// int64 ids kept), a zeros [rows, G] mask scattered and expanded to every
// expert (a copy), made boolean and inverted, the scores outside those
// groups set to −inf (a copy), the top k of those (ids kept), the
// original scores gathered at them, renormalised in place (a saved copy
// and the sum; not with model.MoE.NoRenorm, GLM-4's norm_topk_prob false)
// and scaled. It returns the weights, the ids and the
// logits, which DeepseekV3MoE.forward binds (as _) until it returns; the
// router's locals go as it returns.
func (s *sim) routeSigmoidGroup(o *moeOp, x *tensor, rows int64) (w, idx, logits *tensor) {
	k := o.k
	e, g := k.Experts, k.Groups
	logits = s.routerLogits32(o, x, rows)
	sc := s.unary("Sigmoid", logits, false, true)
	choice := s.alloc(rows*e, promote(sc.dt, s.cfg.param), catTemp, "scores_for_choice")
	if n := s.record("Add", []*tensor{sc}, choice); n != nil {
		n.pass = true
	}
	// The group selection's nodes are reachable from no gradient
	// (group_idx has none): not recorded, their tensors go with the
	// router's locals (measured: Moonlight's cut, the top-2 ids freed as
	// the router returns, bench/results/2026-11-27-h200-deepseek-traces).
	gv := s.alloc(rows*g*2, choice.dt, catTemp, "top-k values")
	gi := s.alloc(rows*g*2, i64, catTemp, "group top-2")
	gs := s.alloc(rows*g, choice.dt, catTemp, "group_scores")
	s.unref(gv)
	tgv := s.alloc(rows*k.TopGroups, gs.dt, catTemp, "top-k values")
	gidx := s.alloc(rows*k.TopGroups, i64, catTemp, "group_idx")
	s.unref(tgv)
	gm := s.alloc(rows*g, gs.dt, catTemp, "group_mask")
	sm := s.alloc(rows*e, gs.dt, catTemp, "score_mask")
	mb := s.alloc(rows*e, u8, catTemp, "score_mask.bool()")
	inv := s.alloc(rows*e, u8, catTemp, "~score_mask")
	s.unref(mb)
	masked := s.maskCopy(choice, inv)
	s.unref(inv)
	s.unref(choice) // rebound to the masked copy
	tv, idx := s.topk(masked, rows*k.TopK, masked.dt, "topk_indices")
	s.unref(tv)
	tw := s.alloc(rows*k.TopK, sc.dt, catTemp, "topk_weights")
	if n := s.record("Gather", []*tensor{sc}, tw); n != nil {
		s.save(n, idx)
	}
	norm, den := tw, (*tensor)(nil)
	if !k.NoRenorm {
		sum := s.alloc(rows, tw.dt, catTemp, "denominator")
		den = s.alloc(rows, tw.dt, catTemp, "denominator + eps")
		s.unref(sum)
		var clone *tensor
		norm, clone = s.divInPlace(tw, den)
		s.unref(clone)
		s.unref(tw)
	}
	w = s.scalarOp(norm)
	s.unref(norm)
	for _, t := range []*tensor{sc, masked, gi, gs, gidx, gm, sm, den} {
		s.unref(t)
	}
	return w, idx, logits
}

// routerLogits32 is DeepSeek's routers' F.linear(x.type(torch.float32),
// W.type(torch.float32)): fp32 copies of both in bf16 (under autocast the
// linear casts them to bf16 as ever), freed once the logits exist.
func (s *sim) routerLogits32(o *moeOp, x *tensor, rows int64) *tensor {
	x32, w32 := s.to(x, f32), s.to(s.weight(o.pls[:], o.router), f32)
	logits := s.matmulView(x32, w32, nil, rows, o.k.Experts, false, false)
	s.unref(x32)
	s.unref(w32)
	return logits
}

// routeSoftmax is DeepSeek-V2's DeepseekV2TopkRouter over rows tokens:
// fp32 logits (routerLogits32), scores = softmax(logits, fp32) (saved; a
// cast first where autocast made the logits half); with
// group_limited_greedy (model.RouterSoftmaxGroup) each group's best score
// (max over the group: values and int64 ids, which its node keeps while
// the values live), the best TopGroups groups (their ids; the values and
// their node go at once), a zeros [rows, G] mask
// scattered and expanded to every expert (a copy), made boolean and
// inverted, the scores outside those groups set to 0 (a copy whose node
// keeps the mask); then the top k of the scores (greedy, or of the masked
// copy), scaled by routed_scaling_factor (the unscaled values go as the
// name is rebound). It returns the weights, the ids and the logits, which
// DeepseekV2Moe.forward binds (as _) until it returns; the router's locals
// go as it returns, and with them the group selection's nodes, which no
// gradient reaches (group_idx has none), so they are not recorded.
func (s *sim) routeSoftmax(o *moeOp, x *tensor, rows int64) (w, idx, logits *tensor) {
	k := o.k
	logits = s.routerLogits32(o, x, rows)
	l32 := s.to(logits, f32)
	sc := s.softmax(l32)
	s.unref(l32)
	choice := s.ref(sc)
	var locals []*tensor
	if k.Router == model.RouterSoftmaxGroup {
		e, g := k.Experts, k.Groups
		gs := s.alloc(rows*g, f32, catTemp, "group max") // .max(dim=-1).values
		gi := s.alloc(rows*g, i64, catTemp, "group max ids")
		tgv := s.alloc(rows*k.TopGroups, f32, catTemp, "top-k values")
		gidx := s.alloc(rows*k.TopGroups, i64, catTemp, "group_idx")
		s.unref(tgv)
		gm := s.alloc(rows*g, f32, catTemp, "group_mask")
		sm := s.alloc(rows*e, f32, catTemp, "score_mask")
		mb := s.alloc(rows*e, u8, catTemp, "score_mask.bool()")
		inv := s.alloc(rows*e, u8, catTemp, "~score_mask")
		s.unref(mb)
		masked := s.maskCopy(sc, inv)
		s.unref(inv)
		s.unref(choice) // scores rebound to the masked copy
		choice = masked
		locals = append(locals, gs, gi, gidx, gm, sm)
	}
	tv, idx := s.topk(choice, rows*k.TopK, f32, "topk_indices")
	w = s.scalarOp(tv)
	s.unref(tv)
	s.unref(choice)
	s.unref(sc)
	for _, t := range locals {
		s.unref(t)
	}
	return w, idx, logits
}

// route is the top-k router (Qwen2MoeTopKRouter and the routers built on
// it): logits = x·Wᵀ (bf16 under autocast), softmax in fp32, top-k, the
// in-place renormalisation (norm_topk_prob, unless model.MoE.NoRenorm; it
// saves a clone of the top-k values and their sum, tensors of rows·k and
// rows), and the weights cast back to the logits' dtype, except
// Mixtral's (model.RouterSoftmaxTopKFP32), which keeps them fp32
// (modeling_mixtral.py; measured: Mixtral-8x7B's first two layers, its
// weighted rows fp32, bench/results/2026-11-27-h200-fused-lora-traces). It
// returns the routing weights [rows, k] and the int64 expert ids [rows, k].
func (s *sim) route(o *moeOp, x *tensor, rows int64) (w, idx *tensor) {
	k := o.k
	logits := s.matmul(x, s.weight(o.pls[:], o.router), nil, rows, k.Experts)
	l32 := s.to(logits, f32) // softmax(..., dtype=float) converts first
	probs := s.softmax(l32)
	s.unref(l32)
	top, idx := s.topk(probs, rows*k.TopK, f32, "top-k experts")
	s.unref(probs)
	norm := top
	if !k.NoRenorm {
		sum := s.alloc(rows, f32, catTemp, "top-k sum")
		var clone *tensor
		norm, clone = s.divInPlace(top, sum)
		s.unref(top)
		s.unref(sum)
		s.unref(clone)
	}
	if k.Router == model.RouterSoftmaxTopKFP32 {
		w = norm
	} else {
		w = s.to(norm, logits.dt)
		s.unref(norm)
	}
	s.unref(logits)
	return w, idx
}

// routeTopKFirst is GPT-OSS's GptOssTopKRouter: logits = x·Wᵀ + b (bf16
// under autocast), the top k of the logits (values and int64 ids; the
// node keeps the ids), softmax over the k values in their dtype (the
// routing weights, which it saves). It returns the weights, the ids and
// the logits, which GptOssMLP.forward binds (as _) until it returns.
func (s *sim) routeTopKFirst(o *moeOp, x *tensor, rows int64) (w, idx, logits *tensor) {
	k := o.k
	logits = s.matmul(x, o.router, o.routerB, rows, k.Experts)
	top, idx := s.topk(logits, rows*k.TopK, logits.dt, "top-k experts")
	w = s.softmax(top)
	s.unref(top)
	return w, idx, logits
}

// returnScores is GPT-OSS's MLP returning its routing weights beside its
// output: the decoder layer binds them to the name that held the
// attention's weights (hidden_states, _ = self.mlp(...)), which frees
// those, and keeps them until it returns. Without attention weights held
// (a spec's block under SDPA) the weights go with the MLP's return.
func (s *sim) returnScores(w *tensor) {
	if n := len(s.unitHold); n > 0 {
		s.unref(s.unitHold[n-1])
		s.unitHold[n-1] = w
		return
	}
	s.unref(w)
}

// topk is torch.topk over x: n values of dtype dt and n int64 ids (name),
// the node keeping the ids for its backward (a scatter into zeros of x's
// size).
func (s *sim) topk(x *tensor, n, dt int64, name string) (vals, ids *tensor) {
	vals = s.alloc(n, dt, catTemp, "top-k values")
	ids = s.alloc(n, i64, catTemp, name)
	if nd := s.record("Topk", []*tensor{x}, vals); nd != nil {
		s.save(nd, ids)
	}
	return vals, ids
}

// divInPlace is x /= d for top-k weights x and their per-row sum d: a
// new version of x's storage whose node keeps a clone of x (the in-place
// division's self) and d. It returns the new version and the clone.
func (s *sim) divInPlace(x, d *tensor) (y, clone *tensor) {
	clone = s.alloc(x.elems, x.dt, catTemp, x.name+" (saved copy)")
	y = s.view(x, x.elems)
	if n := s.record("Div", []*tensor{x}, y); n != nil {
		n.pass = true
		s.save(n, clone, d)
	}
	return y, clone
}

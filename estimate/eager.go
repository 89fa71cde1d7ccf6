package estimate

import "github.com/memplan/memplan/model"

// eagerAttention is transformers' eager_attention_forward: the scores
// [b, heads, s, s] go through softmax, in fp32 or in their own dtype by
// the model's convention (model.Attention.Softmax), and are kept for
// backward. It returns the output and the probabilities (after dropout),
// which the function returns too and the caller holds. With sinks (a
// parameter of one logit per head: model.Attention.Sinks) the
// probabilities are GPT-OSS's (sinkProbs).
func (s *sim) eagerAttention(q, k, v, mask *tensor, b, heads, kvHeads, sq, hd int64, p float64, soft string, softcap float64, sinks *tensor) (out, probs *tensor) {
	k, v = s.repeatKV(k, v, heads, kvHeads) // repeat_kv expands and reshapes (repeatKV)
	w := s.eagerScores(q, k, mask, b*heads*sq*sq, softcap)
	var pr *tensor
	var locals [3]*tensor // GPT-OSS's combined_logits, probs and scores
	if sinks != nil {
		pr, locals = s.sinkProbs(w, sinks, v, b*heads*sq, p)
	} else {
		pr = s.eagerProbs(w, q, v, soft)
		if p > 0 {
			d := s.dropout(pr)
			s.unref(pr)
			pr = d
		}
	}
	vc := s.castLow(v)
	prc := s.castLow(pr)
	var vfolded *tensor
	if (vc.perm || vc.expanded) && s.cfg.eager && b > 1 {
		// matmul folds a heads-major value too (eagerScores; measured:
		// GPT-2 checkpointed, modeling_gpt2.py:69, the copy freed once
		// the product returns).
		vfolded = vc
		vc = s.contiguous(vc)
	}
	y := s.alloc(b*heads*sq*hd, prc.dt, catTemp, "attention out")
	if n := s.record("Bmm", []*tensor{vc, prc}, y); n != nil {
		n.gemm = true
		s.save(n, prc, vc)
		// The output's gradient comes back through transpose(1, 2)
		// heads-major and strided; matmul's backward reshapes it to fold
		// [b, heads], a copy when b > 1, and the strided one is freed
		// (measured: OLMo-1B eager checkpointed, 16 MiB per layer before
		// the value's gradient, bench/results/2026-11-27-h100-olmo-ckpt-traces;
		// GPT-2 eager, 12 MiB, bench/results/2026-11-26-h100-eager-traces).
		n.copyIn = s.cfg.eager && b > 1
	}
	s.unref(prc)
	s.unref(vc)
	s.unref(vfolded)
	// transpose(1, 2).contiguous(): a copy whose backward passes the
	// gradient on. repeat_kv's copies are eager_attention_forward's locals:
	// freed when it returns, after the copy (measured: Llama-3.2-1B eager,
	// 2026-11-23-h100-traces).
	c := s.contiguous(y)
	s.unref(y)
	s.unref(k)
	s.unref(v)
	for _, t := range locals {
		s.unref(t)
	}
	return c, pr
}

// sinkProbs is GPT-OSS's eager_attention_forward from the masked scores w
// (consumed) to the probabilities that multiply the values, over rows =
// b·heads·seq rows: the sinks expanded to [b, heads, seq, 1] and
// concatenated to the scores (cat promotes, so under autocast both are
// fp32), the rows' maximum subtracted (max saves its int64 indices; the
// concatenation is dropped once the difference exists), softmax in that
// dtype, the sink column sliced off (a view), dropout, and the cast to the
// values' dtype (a copy under autocast). It returns the probabilities and
// the locals bound until the function returns: combined_logits (the
// difference), probs and scores. The masked scores stay bound to
// attn_weights until the cast rebinds it.
func (s *sim) sinkProbs(w, sinks, v *tensor, rows int64, p float64) (pr *tensor, locals [3]*tensor) {
	sv := s.view(sinks, rows)
	sv.expanded, sv.name = true, "sinks (expanded)"
	s.record("Expand", []*tensor{sinks}, sv)
	combined := s.alloc(w.elems+rows, promote(w.dt, sinks.dt), catTemp, "scores with sinks")
	if n := s.record("Cat", []*tensor{w, sv}, combined); n != nil {
		n.split = true
	}
	s.unref(sv)
	mx := s.alloc(rows, combined.dt, catTemp, "max")
	idx := s.alloc(rows, i64, catTemp, "max indices")
	if n := s.record("MaxDim", []*tensor{combined}, mx); n != nil {
		s.save(n, idx)
	}
	s.unref(idx)
	logits := s.sub(combined, mx)
	s.unref(mx)
	s.unref(combined)
	probs := s.softmax(logits)
	scores := s.view(probs, w.elems)
	s.record("Slice", []*tensor{probs}, scores)
	d := s.ref(scores)
	if p > 0 {
		s.unref(d)
		d = s.dropout(scores)
	}
	pr = s.to(d, v.dt)
	s.unref(d)
	s.unref(w)
	return pr, [3]*tensor{logits, probs, scores}
}

// eagerScores is eager attention's q·kᵀ, scaled and masked: the matrix
// product of the key's and the query's autocast casts, of scores
// elements.
func (s *sim) eagerScores(q, k, mask *tensor, scores int64, softcap float64) *tensor {
	// Autocast casts right to left (matmulView): the key, then the query
	// (and in eagerAttention the values, then the probabilities).
	kc := s.castLow(k)
	qc := s.castLow(q)
	var folded, kfolded *tensor
	if qc.perm && s.cfg.eager && s.cfg.batch > 1 {
		// torch.matmul folds [b, heads] into one batch dimension with a
		// reshape, which copies a heads-major query (a view of a packed
		// projection, or of a projection's [batch, seq, heads, dim] and
		// what rotary embeddings make from it; with one sequence the
		// fold is a view); the copy is what the product saves, and the
		// query it was made from stays referenced until the product
		// returns (measured: GPT-2 eager bf16, 12 MiB per layer at
		// modeling_gpt2.py's matmul, bench/results/2026-11-26-h100-eager-traces;
		// Llama-3.2-1B in AMP at batch 4, the autocast copy freed after
		// the scores are made, bench/results/2026-11-27-heldout22-traces).
		folded = qc
		qc = s.contiguous(qc)
	}
	if (kc.perm || kc.expanded) && s.cfg.eager && s.cfg.batch > 1 {
		// And the transposed key, folded second, when it is heads-major:
		// without a key/value cache (checkpointing turns it off) and
		// without repeat_kv's copy (measured: GPT-2 in AMP, checkpointed,
		// 12 MiB at modeling_gpt2.py:58 after the query's,
		// bench/results/2026-11-27-heldout23-traces).
		kfolded = kc
		kc = s.contiguous(kc)
	}
	sc := s.alloc(scores, qc.dt, catTemp, "scores")
	// BmmBackward0 computes its inputs' gradients in the sorted order of
	// their names, mat2 before self (as MulBackward0 does, nodeGrads):
	// the key's, then the query's (measured: Llama-3.2-1B eager,
	// 2026-11-23-h100-traces/llama1b-eager).
	if n := s.record("Bmm", []*tensor{kc, qc}, sc); n != nil {
		n.gemm = true
		s.save(n, qc, kc)
	}
	s.gemm(qc.dt, false)
	s.unref(folded)
	s.unref(kfolded)
	s.unref(qc)
	s.unref(kc)
	w := s.rescale(sc)
	if softcap > 0 {
		// Gemma 2's eager_attention_forward (measured: held-out set 21,
		// bench/results/2026-11-27-h100-heldout21.jsonl).
		w = s.softcap(w)
	}
	if mask != nil {
		m := s.add(w, mask)
		s.unref(w)
		w = m
	}
	return w
}

// eagerProbs is the scores' softmax by the model's convention (soft:
// model.Attention.Softmax) and its cast, the probabilities that multiply
// the values; it consumes w.
func (s *sim) eagerProbs(w, q, v *tensor, soft string) *tensor {
	var w32 *tensor
	if soft == model.SoftmaxFP32 {
		w32 = s.to(w, f32) // softmax(dtype=torch.float32)
	} else {
		w32 = s.castF32(w) // autocast's fp32 list, else the scores' dtype
		s.unref(w)
	}
	sm := s.softmax(w32)
	s.unref(w32)
	var pr *tensor
	switch soft {
	case model.SoftmaxFP32:
		// softmax(attn_weights, dtype=torch.float32).to(query.dtype): the
		// masked scores stay bound to attn_weights until the cast back
		// is made (measured: Pythia-160M eager bf16,
		// bench/results/2026-11-26-h100-eager-traces).
		pr = s.to(sm, q.dt)
		s.unref(w)
	case model.SoftmaxValue:
		pr = s.to(sm, v.dt) // attn_weights.type(value.dtype)
	default:
		pr = s.ref(sm)
	}
	s.unref(sm)
	return pr
}

// expandCopy is repeat_kv's copy of x with each key/value head repeated
// rep times.
func (s *sim) expandCopy(x *tensor, rep int64) *tensor {
	y := s.alloc(x.elems*rep, x.dt, catTemp, "repeat_kv")
	if n := s.record("Expand", []*tensor{x}, y); n != nil {
		n.sumsTo = true
	}
	return y
}

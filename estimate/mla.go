package estimate

// DeepSeek's multi-head latent attention (model.MLA) as transformers
// 5.17's DeepseekV3Attention runs it (modeling_deepseek_v3.py), and
// DeepseekV2Attention (modeling_deepseek_v2.py), which differs only in
// rotating as complex numbers (mlaRotateComplex).

// mlaParams holds the latent attention's own parameters: the query's
// down projection, its norm and up projection (or one projection), and the
// keys' and values' down projection with the shared rotary dims, its norm
// and up projection. o and oB are the attnOp's.
type mlaParams struct {
	qa, qaB, qaNorm, qb *tensor
	kva, kvaB, kvNorm   *tensor
	kvb                 *tensor
}

// buildMLA allocates the latent attention's parameters in the order
// DeepseekV3Attention registers them: q_proj or q_a_proj, q_a_layernorm,
// q_b_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj.
func (a *attnOp) buildMLA(s *sim) {
	k, m := a.k, a.k.MLA
	p := &mlaParams{}
	qk := k.Heads * (m.Nope + m.Rope)
	if m.QRank > 0 {
		p.qa, p.qaB = s.matrix(m.QRank, k.Dim, 1, "q_a_proj.weight"), s.optParam(k.Bias, m.QRank, "q_a_proj.bias")
		p.qaNorm = s.param(m.QRank, "q_a_layernorm.weight")
		p.qb = s.matrix(qk, m.QRank, 1, "q_b_proj.weight")
	} else {
		p.qb = s.matrix(qk, k.Dim, 1, "q_proj.weight")
	}
	p.kva = s.matrix(m.KVRank+m.Rope, k.Dim, 1, "kv_a_proj_with_mqa.weight")
	p.kvaB = s.optParam(k.Bias, m.KVRank+m.Rope, "kv_a_proj_with_mqa.bias")
	p.kvNorm = s.param(m.KVRank, "kv_a_layernorm.weight")
	p.kvb = s.matrix(k.Heads*(m.Nope+m.V), m.KVRank, 1, "kv_b_proj.weight")
	a.o, a.oB = s.matrix(k.Dim, k.Heads*m.V, 1, "o.weight"), s.optParam(k.OutBias, k.Dim, "o.bias")
	a.mla = p
}

// mlaForward is DeepseekV3Attention.forward over x: the query (through
// its rank when it has one) viewed as heads and split into its unrotated
// and rotated parts; the compressed keys and values split into the latent
// part, normalised, and the shared rotary part; both rotated; the
// key/value cache's copies of the latent and rotary parts (without
// checkpointing); the query concatenated back; expand_kv (the latent
// projected up per head and split into keys and values, the key made with
// new_empty and its two parts copied in); attention; the output
// projection. The module's locals (the query projection, the compressed
// projection, the normed latent, the rotated query and key, the up
// projection and the query and key states) stay bound until it returns.
func (a *attnOp) mlaForward(s *sim, x *tensor, st *attnState) *tensor {
	k, m, p := a.k, a.k.MLA, a.mla
	b, seq, rows, h := st.b, st.seq, st.rows, k.Heads
	qk := m.Nope + m.Rope
	var q *tensor
	if m.QRank > 0 {
		qa := a.linear(s, x, p.qa, p.qaB, rows, m.QRank)
		qn := s.rmsNorm(qa, p.qaNorm, rows)
		s.unref(qa)
		q = a.linear(s, qn, p.qb, nil, rows, h*qk)
		s.unref(qn)
	} else {
		q = a.linear(s, x, p.qb, nil, rows, h*qk)
	}
	qPass, qRot := s.view(q, rows*h*m.Nope), s.view(q, rows*h*m.Rope)
	qPass.perm, qRot.perm = true, true
	s.record("Split", []*tensor{q}, qPass, qRot)
	ckv := a.linear(s, x, p.kva, p.kvaB, rows, m.KVRank+m.Rope)
	kvNope, kRot := s.view(ckv, rows*m.KVRank), s.view(ckv, rows*m.Rope)
	s.record("Split", []*tensor{ckv}, kvNope, kRot)
	kvn := s.rmsNorm(kvNope, p.kvNorm, rows)
	s.unref(kvNope)
	var qr, kr *tensor
	if m.Complex {
		qr, kr = s.mlaRotateComplex(qRot, kRot, s.ropeComplexTable(seq, m.Rope))
		s.unref(qRot)
		s.unref(kRot)
		st.held = append(st.held, s.ref(qr)) // q_pe, bound until the module returns
	} else {
		cos, sin := s.ropeTables(seq, m.Rope, x.dt, false)
		qr = s.mlaRotate(qRot, cos, sin, m.Interleave)
		s.unref(qRot)
		st.held = append(st.held, s.ref(qr)) // q_rot, bound until the module returns
		kr = s.mlaRotate(kRot, cos, sin, m.Interleave)
		s.unref(kRot)
	}
	if a.cached(s) {
		// DynamicCache.update concatenates the latent part and the shared
		// rotary key into the cache, and those copies are what the rest
		// of the layer uses (as kvCache does for whole keys and values).
		kvn, kr = s.cacheCopy(kvn), s.cacheCopy(kr)
	}
	qs := s.alloc(b*h*seq*qk, promote(qPass.dt, qr.dt), catTemp, "query_states")
	if n := s.record("Cat", []*tensor{qPass, qr}, qs); n != nil {
		n.split = true
	}
	s.unref(qr)
	s.unref(qPass)
	key, v, kvb := a.expandKV(s, kvn, kr, rows)
	// The normed latent and the rotated key are bound to the module's
	// kv_nope and k_rot (V2: k_nope, k_pe) until it returns, or to the
	// cache's copies (measured: DeepSeek-V2-Lite's checkpointed stage frees
	// the latent at the attention's return,
	// bench/results/2026-11-28-h200x4-shape-inference-traces).
	st.held = append(st.held, kvn, kr)
	y := s.sdpaV(qs, key, v, b, h, seq, qk, m.V)
	o := a.linear(s, y, a.o, a.oB, rows, k.Dim)
	s.unref(y)
	for _, t := range []*tensor{q, ckv, qs, key, v, kvb} {
		s.unref(t)
	}
	for i := len(st.held) - 1; i >= 0; i-- {
		s.unref(st.held[i])
	}
	return o
}

// cacheCopy is DynamicCache.update's concatenation of x into an empty
// cache: a copy the cache holds until the model's outputs are dropped,
// whose backward narrows the gradient (a view).
func (s *sim) cacheCopy(x *tensor) *tensor {
	c := s.alloc(x.elems, x.dt, catTemp, "CacheCat")
	if n := s.record("CacheCat", []*tensor{x}, c); n != nil {
		n.split = true
	}
	s.unref(x)
	s.kvHold = append(s.kvHold, s.ref(c))
	return c
}

// expandKV is DeepseekV3Attention.expand_kv: kv_b_proj over the latent
// part (viewed as heads and split into the unrotated key and the value,
// both views), then key_states = new_empty(...) with the unrotated key
// copied into its first dims and the shared rotary key, expanded over the
// heads, into the rest: two in-place copies into slices, whose backward
// (CopySlices) clones the whole incoming gradient and the slice's part.
func (a *attnOp) expandKV(s *sim, kvn, kr *tensor, rows int64) (key, v, kvb *tensor) {
	k, m := a.k, a.k.MLA
	h := k.Heads
	kvb = a.linear(s, kvn, a.mla.kvb, nil, rows, h*(m.Nope+m.V))
	kNope, v := s.view(kvb, rows*h*m.Nope), s.view(kvb, rows*h*m.V)
	kNope.perm, v.perm = true, true
	s.record("Split", []*tensor{kvb}, kNope, v)
	full := rows * h * (m.Nope + m.Rope)
	key = s.alloc(full, kvb.dt, catTemp, "key_states")
	k1 := s.view(key, full)
	if n := s.record("CopySlices", []*tensor{kNope}, k1); n != nil {
		// The whole gradient cloned first, with no earlier version of
		// the key to hand it to, and dropped once the slice's clone (the
		// unrotated key's gradient) exists.
		n.bwdTemp = full * kvb.dt
	}
	s.unref(kNope)
	kre := s.view(kr, rows*h*m.Rope)
	kre.expanded = true
	s.record("Expand", []*tensor{kr}, kre)
	k2 := s.view(key, full)
	if n := s.record("CopySlices", []*tensor{k1, kre}, k2); n != nil {
		// The whole gradient cloned (the first copy's), the slice's clone
		// (the rotary key's), then zeros for the slice, freed at once
		// (measured: Moonlight's cut, bench/results/2026-11-27-h200-deepseek-traces).
		n.reduceTemp = rows * h * m.Rope * kvb.dt
	}
	s.unref(kre)
	s.unref(k1)
	s.unref(key)
	return k2, v, kvb
}

// mlaRotate is the latent attention's rotary embedding of one tensor x
// (the query's rotated part, or the shared rotary key): with interleave
// (apply_rotary_pos_emb_interleave) the even and odd dims (two strided
// slices, each padding its gradient back to x's size in backward) times
// the first half of the cos and sin tables, x1·cos − x2·sin and x2·cos +
// x1·sin concatenated; else Llama's x·cos + rotate_half(x)·sin.
func (s *sim) mlaRotate(x, cos, sin *tensor, interleave bool) *tensor {
	if !interleave {
		y, _ := s.ropeRotate(x, cos, sin, 1)
		return y
	}
	c, sn := s.view(cos, cos.elems/2), s.view(sin, sin.elems/2)
	x1, x2 := s.view(x, x.elems/2), s.view(x, x.elems/2)
	s.record("Slice", []*tensor{x}, x1)
	s.record("Slice", []*tensor{x}, x2)
	y := s.rotatePairs(x, x1, x2, c, sn)
	s.unref(c)
	s.unref(sn)
	return y
}

// mlaRotateComplex is DeepSeek-V2's apply_rotary_emb over the query's
// rotated part q and the shared rotary key k: each made fp32 (x.float(), a
// copy of a half tensor, x itself in fp32; both locals until the function
// returns) and viewed as complex pairs, each times the complex table (a
// complex64 product of x's bytes in fp32, which saves the table), viewed
// back as real pairs and cast to x's dtype (type_as: a copy of a half
// tensor, after which the product goes; the product itself in fp32). In
// backward each cast casts the gradient, the product multiplies it by the
// table's conjugate, and the views pass it on.
func (s *sim) mlaRotateComplex(q, k, table *tensor) (qr, kr *tensor) {
	q32, k32 := s.to(q, f32), s.to(k, f32)
	qr, kr = s.complexRotate(q32, table, q.dt), s.complexRotate(k32, table, k.dt)
	s.unref(q32)
	s.unref(k32)
	return qr, kr
}

// complexMul is x (fp32 viewed as complex pairs) times the complex
// rotary table. MulBackward0 multiplies the gradient by table.conj(), a
// conjugate view the product's kernel cannot read as it is: the table is
// copied with its conjugate resolved, a table-sized temporary made before
// the input's gradient and freed once it exists (measured: one per
// rotated query and key a step, 1 MiB at 2,048 tokens and 2 MiB at 4,096
// in Llama 4's histories, bench/results/2026-11-28-h200-heldout57-traces
// and bench/results/2026-11-28-h200x2-heldout-53; the thirty-sixth
// session). With strided, the gradient arrives strided and
// view_as_real's backward copies it contiguous first (node.copyIn;
// rotaryComplex).
func (s *sim) complexMul(x, table *tensor, strided bool) *tensor {
	y := s.mul(x, table)
	if y.req {
		if n := s.tape[len(s.tape)-1]; n.outs[0] == y {
			n.bwdTemp, n.copyIn = table.bytes(), strided
		}
	}
	return y
}

// complexRotate is view_as_real(x32 · table).flatten(3).type_as(x) for
// an fp32 x32 whose original dtype is dt.
func (s *sim) complexRotate(x32, table *tensor, dt int64) *tensor {
	p := s.complexMul(x32, table, false)
	y := s.to(p, dt)
	s.unref(p)
	return y
}

// sdpaV is transformers' sdpa_attention_forward over queries and keys of
// qk dims and values of vd dims per head. The flash kernel takes only
// equal head dims; with vd ≠ qk PyTorch 2.11 picks cuDNN's kernel in half
// precision (torch._fused_sdp_choice on an H200: CUDNN_ATTENTION) and the
// memory-efficient one in fp32 (bench/results/2026-11-27-h200-deepseek-sdpchoice.txt).
// Either saves q, k, v, the output and an fp32 row statistic; cuDNN
// writes its output in the query's layout (heads-major), which
// transpose(1, 2).contiguous() copies; its backward takes a copy of the
// output's gradient (the original freed first), then dq, dk and dv and an
// fp32 dq accumulator with row sums (measured: Moonlight's cut, 48.25 MiB
// at 2 × 2,048 tokens and 16 heads of 192). With equal dims it is sdpa.
func (s *sim) sdpaV(q, k, v *tensor, b, heads, sq, qk, vd int64) *tensor {
	if vd == qk {
		return s.sdpa(q, k, v, b, heads, sq, qk)
	}
	cudnn := s.cfg.compute != f32 // the kernels' dtype: the compute dtype, under autocast too
	y, n := s.sdpaKernel(q, k, v, b*sq*heads*vd, b*heads*sq, 0, func(qc, _, y *tensor) int64 {
		ws := qc.elems*f32 + b*heads*sq*f32 + sdpaWSExtra
		if !cudnn {
			ws += y.elems * qc.dt // the memory-efficient kernel's copy of the gradient
		}
		return ws
	})
	if n != nil && cudnn {
		n.copyIn = true
	}
	if cudnn {
		c := s.contiguous(y)
		s.unref(y)
		y = c
	}
	return y
}

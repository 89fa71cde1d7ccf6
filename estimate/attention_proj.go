package estimate

import "github.com/memplan/memplan/model"

// The attention's projections: q, k and v as each family makes them, and
// the views, norms and gradient layouts that come with them.

// project computes q, k and v.
func (a *attnOp) project(s *sim, x *tensor, st *attnState) {
	k := a.k
	qd, kvd := k.Heads*k.HeadDim, k.KVHeads*k.HeadDim
	switch {
	case k.Style == "torch":
		// nn.MultiheadAttention(batch_first=True) transposes its input to
		// [seq, batch, dim]; F.linear on that view copies it to a
		// contiguous matrix, which the in_proj saves instead of x (the
		// copy's backward is a view: the gradient passes). Then
		// unflatten/transpose/contiguous copies the projection; q, k, v
		// are views of it.
		// Under autocast the cast to half comes first and keeps the
		// transposed layout; the copy is of the half tensor (matmulView).
		// q, k and v stay bound in multi_head_attention_forward until it
		// returns, after the output projection (measured: ViT-B/16,
		// bench/results/2026-11-23-h100-traces2).
		proj := s.matmulView(x, a.qkv, a.qkvB, st.rows, qd+2*kvd, true, false)
		c := s.unary("Clone", proj, false, false)
		s.unref(proj)
		st.q, st.k, st.v = s.selectQKV(c, qd, st.rows)
		s.unref(c)
		st.held = append(st.held, s.ref(st.q), s.ref(st.k), s.ref(st.v))
	case k.FusedQKV:
		qkv := a.linear(s, x, a.qkv, a.qkvB, st.rows, qd+2*kvd)
		st.q, st.k, st.v = s.split(qkv, qd, kvd, st.rows)
		// transformers keeps the packed projection in a local variable
		// until the attention module returns (measured: GPT-NeoX frees it
		// at module return, after the output projection).
		st.held = append(st.held, qkv)
	default:
		a.projectSeparate(s, x, st, qd, kvd)
	}
}

// projectSeparate computes q, k and v with transformers' three projections
// (q_proj, k_proj, v_proj), in the order and with the views and norms of
// each family.
func (a *attnOp) projectSeparate(s *sim, x *tensor, st *attnState, qd, kvd int64) {
	k := a.k
	// Qwen3 normalises each query and key head (RMSNorm over
	// head_dim) right after its projection, before the next
	// projection: q_norm(q_proj(x)), then k_norm(k_proj(x)), then
	// v_proj(x) (modeling_qwen3.py, modeling_qwen3_moe.py).
	// Without the norms, the view's copy comes straight after each
	// projection whose gradient returns heads-major (headView).
	heads := a.headsMajorGrads(s, st.seq)
	switch {
	case k.QKNorm && (k.QKNormOffset || k.QKNormLate):
		// Gemma 3 projects all three first and normalises the
		// transposed query and key after (modeling_gemma3.py; its
		// allocator history, bench/results/2026-11-27-gemma-eager-traces);
		// GLM-4 MoE normalises the heads before it transposes them
		// (modeling_glm4_moe.py), the same tensors.
		q := s.matmul(x, a.q, a.qB, st.rows, qd)
		kk := s.matmul(x, a.kw, a.kB, st.rows, kvd)
		st.v = headView(s, s.matmul(x, a.v, a.vB, st.rows, kvd), heads)
		st.q = a.qkNorm(s, q, a.qNorm, st.rows*k.Heads)
		st.k = a.qkNorm(s, kk, a.kNorm, st.rows*k.KVHeads)
		st.q.perm, st.k.perm, st.v.perm = true, true, true
		return
	case k.ProjectFirst || k.QKNorm && k.QKNormWhole:
		// OLMo makes all three projections before it views any as
		// heads (modeling_olmo.py, where clip_qkv may clamp them
		// first), and OLMo 2 normalises each whole projection as it
		// comes, q_norm(q_proj(x)), k_norm(k_proj(x)), then
		// v_proj(x), and views all three after (modeling_olmo2.py).
		// The views' nodes are then the latest made, so in backward
		// their copies of the heads-major gradients all come before
		// the projections' products (measured: OLMo-1B's
		// checkpointed histories, the three copies and then the
		// products, bench/results/2026-11-27-h100-olmo-ckpt-traces),
		// and the rotary embedding's gradient is copied before the
		// norm's.
		q := a.qkNorm(s, s.matmul(x, a.q, a.qB, st.rows, qd), a.qNorm, st.rows)
		kk := a.qkNorm(s, s.matmul(x, a.kw, a.kB, st.rows, kvd), a.kNorm, st.rows)
		v := s.matmul(x, a.v, a.vB, st.rows, kvd)
		st.q = headView(s, q, heads || a.rope)
		st.k = headView(s, kk, heads || a.rope)
		st.v = headView(s, v, heads)
		st.q.perm, st.k.perm, st.v.perm = true, true, true
		return
	case k.QKNorm:
		st.q = a.qkNorm(s, s.matmul(x, a.q, a.qB, st.rows, qd), a.qNorm, st.rows*k.Heads)
		st.k = a.qkNorm(s, s.matmul(x, a.kw, a.kB, st.rows, kvd), a.kNorm, st.rows*k.KVHeads)
	default:
		qHeads, kHeads := a.sdpaGradLayouts(s, heads)
		st.q = headView(s, s.matmul(x, a.q, a.qB, st.rows, qd), qHeads)
		st.k = headView(s, s.matmul(x, a.kw, a.kB, st.rows, kvd), kHeads)
	}
	st.v = headView(s, s.matmul(x, a.v, a.vB, st.rows, kvd), heads)
	// Each is its projection viewed [batch, seq, heads, dim] and
	// transposed: heads-major, not row-major (eagerScores).
	st.q.perm, st.k.perm, st.v.perm = true, true, true
}

// sdpaGradLayouts says whether the query's and the key's gradients come
// back to their projections' views heads-major (headView), given heads,
// whether the attention hands its inputs' gradients back so
// (headsMajorGrads). A rotation after the transpose (apply_rotary_pos_emb's
// rotate_half concatenates heads-major) makes both so. Llama 4 rotates
// before it transposes (rotaryComplex), and view_as_complex's backward
// takes the gradient contiguous: a rotated query and key come back
// row-major whatever the kernel. Its layers without rotary embeddings
// (NoPE) hand fused SDPA the query's own transposed view, whose gradient
// the kernel returns in that view's layout: only the key, whose cached
// or repeated copy is heads-major, comes back so (measured: Scout's cut
// and the test shape in pipeline stages, the query's copy absent in every
// layer and the key's present only in the NoPE layer,
// bench/results/2026-11-28-h200x4-pp-llama4-traces).
func (a *attnOp) sdpaGradLayouts(s *sim, heads bool) (q, k bool) {
	if !a.k.RoPEComplex {
		rot := a.rope
		return heads || rot, heads || rot
	}
	if a.rope {
		return false, false
	}
	return s.cfg.eager || a.mathSDPA(s), heads
}

// headView is transformers' proj(x).view(hidden_shape).transpose(1, 2) on
// a projection. When the gradient comes back contiguous in the transposed
// [batch, heads, seq, head_dim] layout (strided), the transpose hands a
// strided view to the view's backward, whose reshape copies it before the
// projection's backward (measured: the query's copy in Llama-3.2-1B eager,
// the value's in the tiny MoE in AMP, bench/results/2026-11-23-h100-traces;
// none for the value in its checkpointed traces, which keep no cache).
// Qwen3's normed queries and keys make that copy at the norm's view
// (qkNorm).
func headView(s *sim, t *tensor, strided bool) *tensor {
	if !strided {
		return t
	}
	v := s.view(t, t.elems)
	s.record("View", []*tensor{t}, v)
	s.unref(t)
	return v
}

// headsMajorGrads says whether the attention hands its inputs' gradients
// back contiguous in the heads-major layout: eager attention's and the
// math kernel's matrix products make them so, and a KV cache's copies are
// heads-major, which fused SDPA's gradients keep. Fused SDPA on the
// projections' own transposed views returns them in those views' layout.
// The rotary embedding's elementwise backward makes the query's and key's
// heads-major whatever the kernel (measured on Qwen3's q_norm and k_norm,
// qkNorm). So do repeat_kv's copies, which SDPA gets under a sliding
// window's mask (maskedSDPA): their gradients are summed back to the key
// and value heads in that layout (measured: Mistral-7B v0.1 at 4 × 8,192
// tokens, the value's gradient copied at its view,
// bench/results/2026-11-27-h200-mistral-trace).
func (a *attnOp) headsMajorGrads(s *sim, seq int64) bool {
	return s.cfg.eager || a.mathSDPA(s) || a.cached(s) || (a.masked(s, seq) && a.k.KVHeads != a.k.Heads)
}

// cached says whether transformers keeps its KV cache in this training:
// use_cache stays on unless gradient checkpointing turns it off (kvCache).
func (a *attnOp) cached(s *sim) bool {
	return a.k.KVCache && s.ckptMode == model.CkptNone
}

// mathSDPA says whether SDPA falls back to its math kernel (kernel).
func (a *attnOp) mathSDPA(s *sim) bool {
	return !s.cfg.eager && s.cfg.compute == f32 && a.k.KVHeads != a.k.Heads
}

// qkNorm is the query or key norm over rows rows (QKNorm), or t itself
// without one: Qwen3's and Gemma 3's over each head, OLMo 2's over the
// whole projection (QKNormWhole), each in its model's RMSNorm
// (rmsNormOf).
func (a *attnOp) qkNorm(s *sim, t, w *tensor, rows int64) *tensor {
	if !a.k.QKNorm {
		return t
	}
	if a.k.QKNormWhole && a.k.QKNormRanks > 1 {
		return a.qkNormTP(s, t, w, rows)
	}
	if !a.k.QKNormWhole {
		// The norm runs on the projection's view(hidden_shape) and its
		// output is transposed, so its gradient comes back strided
		// through all of its elementwise backward and the view's
		// backward (reshape) copies it (measured: the tiny MoE's bf16
		// checkpointed trace, bench/results/moe-traces/moe-bf16-ckpt).
		t = headView(s, t, true)
	}
	y := s.rmsNormOf(t, w, rows, a.k.QKNormOffset, a.k.QKNormFP32)
	s.unref(t)
	return y
}

// selectQKV is nn.MultiheadAttention's proj[0], proj[1], proj[2]
// (_in_projection_packed): three selects, whose SelectBackward0 each
// allocate a zero tensor of proj's size and copy their gradient into it;
// the engine adds the later ones into the first in place (input_buffer.cpp)
// and frees them (measured: ViT-B/16, bench/results/2026-11-23-h100-traces2).
func (s *sim) selectQKV(c *tensor, d, rows int64) (q, k, v *tensor) {
	views := [3]*tensor{}
	for i := range views {
		views[i] = s.view(c, rows*d)
		s.record("Select", []*tensor{c}, views[i])
	}
	return views[0], views[1], views[2]
}

// split makes q, k, v views of a packed projection; its backward builds
// one gradient of the packed size.
func (s *sim) split(c *tensor, qd, kvd, rows int64) (q, k, v *tensor) {
	q, k, v = s.view(c, rows*qd), s.view(c, rows*kvd), s.view(c, rows*kvd)
	// Each is a column slice of the packed projection viewed heads-major:
	// not row-major (eagerAttention's query copy).
	q.perm, k.perm, v.perm = true, true, true
	s.record("Split", []*tensor{c}, q, k, v)
	return
}

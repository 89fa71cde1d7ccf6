package estimate

import "github.com/memplan/memplan/model"

// Rotary position embeddings as transformers applies them: the model's
// forward makes the cos and sin tables once (prologue, ropeTables; Gemma 3
// a second pair for its sliding layers), and each attention layer rotates
// its queries and keys with them (rotary, ropeRotate, ropeJoin).

// rotary applies rotary embeddings to q and k.
func (a *attnOp) rotary(s *sim, x *tensor, st *attnState) {
	k := a.k
	if k.RoPEComplex {
		a.rotaryComplex(s, st)
		return
	}
	frac := rotaryFrac(k)
	width := a.ropeWidth()
	if k.RoPEHalves {
		width /= 2 // GPT-OSS's tables are half a head wide (ropeBuild)
	}
	cos, sin := s.ropeTables(st.seq, width, a.ropeDt(x), a.localRoPE())
	// apply_rotary_pos_emb rotates q, then k, and only then concatenates
	// each with its unrotated part (GPT-NeoX's and Phi's partial rotary:
	// the allocator history of Pythia-160M, bench/results/2026-11-26-h100-eager-traces).
	q0, k0 := st.q, st.k
	if k.RoPEHalves {
		q2, k2 := s.ropeHalves(st.q, cos, sin), s.ropeHalves(st.k, cos, sin)
		s.unref(st.q)
		s.unref(st.k)
		st.q, st.k = q2, k2
		st.held = append(st.held, s.ref(st.q))
		return
	}
	if k.RoPEUpcast {
		// Cohere's apply_rotary_pos_emb: q = q.float(), k = k.float()
		// first, copies unless they are fp32 already, freed as it returns.
		q0, k0 = s.to(st.q, f32), s.to(st.k, f32)
	}
	qr, qv := s.ropeRotate(q0, cos, sin, frac)
	var q2 *tensor
	if k.RoPEConcat {
		// Phi-3's apply_rotary_pos_emb makes q_embed whole, its
		// concatenation included, before it rotates the key (its
		// allocator history at tp 2,
		// bench/results/2026-11-27-h200x2-tp-families).
		q2 = s.ropeJoin(q0, qr, qv, true)
	}
	kr, kv := s.ropeRotate(k0, cos, sin, frac)
	if k.SlicedRotary && frac < 1 {
		// Phi's forward binds query_rot (rotated) and query_pass (a view
		// of the projection), and the key's, until it returns (measured:
		// phi-2 in AMP, 8 and 10 MiB each freed at the module's return,
		// bench/results/2026-11-27-h200-phi-traces).
		st.held = append(st.held, s.ref(qr), s.ref(st.q), s.ref(kr), s.ref(st.k))
	}
	if !k.RoPEConcat {
		q2 = s.ropeJoin(q0, qr, qv, false)
	}
	k2 := s.ropeJoin(k0, kr, kv, k.RoPEConcat)
	if k.RoPECast || k.RoPEUpcast {
		// q_embed.to(q_type), k_embed.to(k_type): copies when the
		// rotation promoted them, the fp32 results freed as the function
		// returns, then the unrotated query and key as the caller
		// rebinds its names (modeling_olmo2.py; its allocator history,
		// bench/results/2026-11-27-h100-olmo2-traces).
		qc, kc := s.to(q2, st.q.dt), s.to(k2, st.k.dt)
		s.unref(q2)
		s.unref(k2)
		q2, k2 = qc, kc
	}
	if k.RoPEUpcast {
		s.unref(q0)
		s.unref(k0)
	}
	s.unref(st.q)
	s.unref(st.k)
	st.q, st.k = q2, k2
	if k.Style == "hf" {
		// query_states stays referenced until the module returns.
		st.held = append(st.held, s.ref(st.q))
	}
}

// rotaryComplex is Llama 4's apply_rotary_emb over whole heads: fp32
// copies of the query and the key (x.float(), x itself in fp32) viewed as
// complex pairs, each times the complex table (complex64 products of the
// copies' bytes; the table is what they save), viewed back as real pairs,
// and both cast to their dtypes (type_as) before the function's locals
// go, in the order they were bound (the copies, then the products); the
// unrotated projections go as the caller rebinds its names. Then, with
// model.Attention.QKL2Norm, Llama4TextL2Norm on each (qkL2Norm).
//
// In backward, a key whose gradient comes back strided is copied: where
// the layer's masked SDPA runs over repeat_kv's copies (a chunked layer
// with fewer key-value heads than query heads), the copies' gradient is
// summed down heads-major, so the key's arrives through transpose(1, 2)
// strided, and ViewAsRealBackward0 (view_as_complex(grad.contiguous()))
// copies the product's incoming gradient before the product's backward,
// the strided one freed (measured: an 8 MiB fp32 copy per chunked layer
// at 2 × 2,048 and at 1 × 4,096 tokens, made before the key's product's
// backward and its conjugate table, freed once the product's gradient
// exists; Llama 4's test shape, bench/results/2026-11-28-h200-heldout57-traces
// and bench/results/2026-11-28-h200x2-heldout-53; the query's gradient,
// written by the kernel in the query's own layout, is not copied).
func (a *attnOp) rotaryComplex(s *sim, st *attnState) {
	table := s.ropeComplexTable(st.seq, a.k.HeadDim)
	q32, k32 := s.to(st.q, f32), s.to(st.k, f32)
	pq := s.complexMul(q32, table, false)
	pk := s.complexMul(k32, table, a.masked(s, st.seq) && a.k.KVHeads < a.k.Heads)
	q2, k2 := s.to(pq, st.q.dt), s.to(pk, st.k.dt)
	for _, t := range []*tensor{q32, k32, pq, pk, st.q, st.k} {
		s.unref(t)
	}
	st.q, st.k = q2, k2
	if a.k.QKL2Norm {
		st.q = qkL2Norm(s, st.q, st.rows*a.k.Heads)
		st.k = qkL2Norm(s, st.k, st.rows*a.k.KVHeads)
	}
	st.held = append(st.held, s.ref(st.q))
}

// qkL2Norm is Llama4TextL2Norm on x (consumed, as the caller rebinds its
// name) over rows heads: x.float() normalised by its root mean square in
// fp32 (rmsNormalize), cast back to x's dtype, without a weight.
func qkL2Norm(s *sim, x *tensor, rows int64) *tensor {
	n := s.rmsNormalize(x, rows)
	y := s.to(n, x.dt)
	s.unref(n)
	s.unref(x)
	return y
}

// temperature is Llama 4's attention temperature on a layer without
// rotary embeddings (model.Attention.Temperature): positions =
// arange(seq), attn_scales = log1p(floor((positions.float() + 1) /
// floor_scale)) · attn_scale + 1 (small fp32 rows, each step's input going
// once the next exists; both bound until the module returns), then
// (query_states · attn_scales).to(query_states.dtype): an fp32 product
// (its node keeps the scales) cast back, the unscaled query going as its
// name is rebound.
func (a *attnOp) temperature(s *sim, st *attnState) {
	pos := s.alloc(st.seq, i64, catTemp, "positions")
	t := s.alloc(st.seq, f32, catTemp, "positions.float()")
	for range 5 { // + 1, / floor_scale, floor, log1p, · attn_scale
		n := s.alloc(st.seq, f32, catTemp, "attn_scales")
		s.unref(t)
		t = n
	}
	scales := s.alloc(st.seq, f32, catTemp, "attn_scales") // + 1
	s.unref(t)
	p := s.mul(st.q, scales)
	q := s.to(p, st.q.dt)
	s.unref(p)
	s.unref(st.q)
	st.q = q
	st.held = append(st.held, pos, scales)
}

// ropeDt is the rotary tables' dtype for a model whose stream is x's:
// the stream's (cos.to(x.dtype)), or fp32 where the rotary embedding
// returns its tables as computed (model.Attention.RoPEFP32, OLMo 2's).
func (a *attnOp) ropeDt(x *tensor) int64 {
	if a.k.RoPEFP32 {
		return f32
	}
	return x.dt
}

// firstRope is the first attention layer in ins that applies rotary
// embeddings in transformers' style, or nil.
func firstRope(ins []*inst) *attnOp {
	for _, in := range ins {
		if a, ok := in.op.(*attnOp); ok && a.k.RoPE && a.k.Style == "hf" {
			return a
		}
		for list := range in.sublists() {
			if a := firstRope(list); a != nil {
				return a
			}
		}
	}
	return nil
}

// ropeBuild makes the cos and sin tables (sim.ropeT, the local pair when
// local) as transformers' rotary embedding module does in the model's
// forward (prologue): with autocast off, inv_freq times the positions in fp32 (freqs,
// [1, seq, hd/2]; the step's first product, so the thread's cuBLAS
// workspace comes after its output), cat(freqs, freqs) (emb), then
// emb.cos() * attention_scaling and emb.sin() * attention_scaling, each
// product a new tensor and the cos() or sin() freed once it exists, then
// .to(x.dtype), a copy when the stream is half; freqs, emb and the fp32
// tables go when the function returns (measured: Gemma-2-2B in AMP and in
// bf16, modeling_gemma2.py:131-134, bench/results/2026-11-27-heldout22-traces).
// With halves (GPT-OSS's rotary embedding, model.Attention.RoPEHalves)
// emb is freqs itself and the tables are half a head wide.
func (s *sim) ropeBuild(seq, hd, dt int64, local, halves bool) {
	i := 0
	if local {
		i = 2
	}
	freqs := s.alloc(seq*hd/2, f32, catTemp, "rope freqs")
	s.gemm(f32, false)
	var emb *tensor
	if halves {
		hd /= 2
	} else {
		emb = s.alloc(seq*hd, f32, catTemp, "rope emb")
	}
	var t, full [2]*tensor
	for k, name := range [2]string{"rope cos", "rope sin"} {
		raw := s.alloc(seq*hd, f32, catTemp, name)
		full[k] = s.alloc(seq*hd, f32, catTemp, name)
		s.unref(raw)
	}
	t = full
	if dt != f32 {
		for k := range t {
			t[k] = s.alloc(seq*hd, dt, catTemp, full[k].name)
			t[k].prefix = "cast of "
		}
	}
	s.unref(freqs)
	s.unref(emb)
	if dt != f32 {
		s.unref(full[0])
		s.unref(full[1])
	}
	s.ropeT[i], s.ropeT[i+1] = t[0], t[1]
}

// ropeBuildComplex makes DeepSeek-V2's rotary table
// (DeepseekV2RotaryEmbedding.forward; Llama4TextRotaryEmbedding's is the
// same) for hd rotated dims in sim.ropeT[0]:
// with autocast off, freqs = inv_freq times the positions in fp32 ([1,
// seq, hd/2]; the step's first product), torch.polar(ones_like(freqs),
// freqs) (a complex64 table; the ones go once it exists), times
// attention_scaling (a new table; the first goes as the name is rebound);
// freqs goes as the function returns. The table stays complex64 whatever
// the stream's dtype: hd/2 complex numbers per position, the bytes of hd
// fp32 values, which is how the simulator counts it.
func (s *sim) ropeBuildComplex(seq, hd int64) {
	freqs := s.alloc(seq*hd/2, f32, catTemp, "rope freqs")
	s.gemm(f32, false)
	ones := s.alloc(seq*hd/2, f32, catTemp, "ones_like(freqs)")
	polar := s.alloc(seq*hd, f32, catTemp, "freqs_cis")
	s.unref(ones)
	s.ropeT[0] = s.alloc(seq*hd, f32, catTemp, "freqs_cis")
	s.unref(polar)
	s.unref(freqs)
}

// ropeComplexTable returns DeepSeek-V2's or Llama 4's complex rotary
// table, made once per forward (ropeBuildComplex).
func (s *sim) ropeComplexTable(seq, hd int64) *tensor {
	if s.ropeT[0] == nil {
		s.ropeT[0] = s.alloc(seq*hd, f32, catTemp, "freqs_cis")
	}
	return s.ropeT[0]
}

// ropeTables returns the cos and sin tables ([1, seq, head_dim] in the
// stream's dtype), made once per forward like transformers'
// LlamaRotaryEmbedding; local asks for the second pair of a model with a
// local rotary embedding (Gemma 3's sliding layers).
func (s *sim) ropeTables(seq, hd, dt int64, local bool) (cos, sin *tensor) {
	i := 0
	if local {
		i = 2
	}
	switch {
	case s.ropeT[i] != nil:
	case s.cpRope != nil:
		s.ropeT[i], s.ropeT[i+1] = s.cpRope.tables(s, seq*hd, dt) // context_parallel's buffer (contextparallel.go)
	default:
		s.ropeT[i] = s.alloc(seq*hd, dt, catTemp, "rope cos")
		s.ropeT[i+1] = s.alloc(seq*hd, dt, catTemp, "rope sin")
	}
	return s.ropeT[i], s.ropeT[i+1]
}

// localRoPE says whether the layer rotates with the model's local tables:
// a sliding-window layer of a model with a second rotary embedding
// (model.Attention.LocalRoPE, Gemma 3).
func (a *attnOp) localRoPE() bool { return a.k.LocalRoPE && a.window > 0 }

// ropeRotate is apply_rotary_pos_emb's rotation of one tensor: x·cos +
// rotate_half(x)·sin. Under autocast x is half and cos fp32, so the
// result is fp32. With a fraction below 1 (GPT-NeoX's rotary_pct) only the
// first part of each head (xr, the view it returns too) is rotated, and
// ropeJoin concatenates the result back with the rest.
func (s *sim) ropeRotate(x, cos, sin *tensor, frac float64) (y, xr *tensor) {
	xr = x
	if frac < 1 {
		xr = s.view(x, int64(frac*float64(x.elems)))
		s.record("Slice", []*tensor{x}, xr)
	}
	a := s.mul(xr, cos)
	// rotate_half: two slices, the second negated, concatenated. In
	// backward the concatenation hands views of its gradient on, the
	// negation allocates half, and each slice pads its gradient back to
	// the full width (measured: the tiny MoE's bf16 checkpointed trace,
	// bench/results/moe-traces/moe-bf16-ckpt).
	x1, x2 := s.view(xr, xr.elems/2), s.view(xr, xr.elems/2)
	s.record("Slice", []*tensor{xr}, x1)
	s.record("Slice", []*tensor{xr}, x2)
	neg := s.alloc(xr.elems/2, x.dt, catTemp, "neg")
	s.record("Neg", []*tensor{x2}, neg)
	rh := s.alloc(xr.elems, x.dt, catTemp, "rotate_half")
	if n := s.record("Cat", []*tensor{neg, x1}, rh); n != nil {
		n.split = true
	}
	s.unref(neg)
	s.unref(x1)
	s.unref(x2)
	bb := s.mul(rh, sin)
	s.unref(rh)
	y = s.add(a, bb)
	s.unref(a)
	s.unref(bb)
	return y, xr
}

// ropeHalves is GPT-OSS's _apply_rotary_emb of one tensor x with tables
// of half its width: chunk(x, 2) (two views), first = x1·cos − x2·sin and
// second = x2·cos + x1·sin (each product a new tensor dropped once the
// sum exists; a product saves the table, not its half of x), and the two
// concatenated. Under autocast x is half and the tables fp32, so the
// result is fp32. In backward the concatenation hands views of its
// gradient on, the difference negates the second product's, each product
// multiplies the gradient by its table, and the chunk concatenates the
// halves' gradients into one of x's size.
func (s *sim) ropeHalves(x, cos, sin *tensor) *tensor {
	x1, x2 := s.view(x, x.elems/2), s.view(x, x.elems/2)
	s.record("Split", []*tensor{x}, x1, x2)
	return s.rotatePairs(x, x1, x2, cos, sin)
}

// rotatePairs is x1·cos − x2·sin and x2·cos + x1·sin concatenated into a
// tensor of x's size, x1 and x2 being the two halves of x (views it
// consumes), cos and sin tables half x's width (GPT-OSS's halves,
// DeepSeek-V3's interleaved pairs).
func (s *sim) rotatePairs(x, x1, x2, cos, sin *tensor) *tensor {
	a, b := s.mul(x1, cos), s.mul(x2, sin)
	first := s.sub(a, b)
	s.unref(a)
	s.unref(b)
	c, d := s.mul(x2, cos), s.mul(x1, sin)
	second := s.add(c, d)
	s.unref(c)
	s.unref(d)
	y := s.alloc(x.elems, first.dt, catTemp, "rope cat")
	if n := s.record("Cat", []*tensor{first, second}, y); n != nil {
		n.split = true
	}
	for _, t := range []*tensor{first, second, x1, x2} {
		s.unref(t)
	}
	return y
}

// ropeJoin returns the rotated y of x: y itself for a whole rotation, else
// y concatenated with x's unrotated rest (xr is the rotated part's view),
// and with concat a whole rotation concatenated with its empty rest, a
// copy (model.Attention.RoPEConcat).
func (s *sim) ropeJoin(x, y, xr *tensor, concat bool) *tensor {
	whole := xr == x
	if whole && !concat {
		return y
	}
	pass := s.view(x, x.elems-xr.elems)
	s.record("Slice", []*tensor{x}, pass)
	full := s.alloc(x.elems, promote(y.dt, x.dt), catTemp, "rope cat")
	s.record("Cat", []*tensor{y, pass}, full)
	s.unref(y)
	s.unref(pass)
	if !whole {
		s.unref(xr)
	}
	return full
}

// ropeWidth is the dims of each head the rotary embedding rotates: the
// latent attention's shared rotary dims (model.MLA.Rope), or the rotated
// fraction of head_dim.
func (a *attnOp) ropeWidth() int64 {
	if m := a.k.MLA; m != nil {
		return m.Rope
	}
	return int64(rotaryFrac(a.k) * float64(a.k.HeadDim))
}

// rotaryFrac is the fraction of each head the rotary embedding rotates
// (GPT-NeoX's rotary_pct; 1 for the rest).
func rotaryFrac(k *model.Attention) float64 {
	if k.Rotary > 0 {
		return k.Rotary
	}
	return 1
}

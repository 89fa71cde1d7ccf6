package estimate

import (
	"slices"

	"github.com/memplan/memplan/model"
)

// Self-attention: projections, query/key norms, rotary embeddings, the
// KV cache, the attention kernel and the output projection.

func init() {
	register(model.KAttention, buildAttention)
}

// attnOp holds an attention layer's parameters: a packed qkv projection
// (fused, or nn.MultiheadAttention's in_proj) or separate q, k and v, the
// output projection, and the per-head query and key norm weights.
type attnOp struct {
	k *model.Attention
	// window is the sliding window the layer attends through, 0 for
	// none (model.Attention.SlidingAt).
	window int64
	// rope says whether this layer rotates its queries and keys
	// (model.Attention.RoPEAt: SmolLM3's NoPE layers do not).
	rope                 bool
	qkv, qkvB            *tensor
	q, qB, kw, kB, v, vB *tensor
	o, oB                *tensor
	qNorm, kNorm         *tensor
	sinks                *tensor // model.Attention.Sinks
	mla                  *mlaParams
	// ring is context parallelism's kernel in place of SDPA's, for
	// transformers' module (model.RingAttention.HF), or nil.
	ring func(*sim, *attnState) *tensor
}

func buildAttention(s *sim, l *model.Layer, _ map[string]*tensor) op {
	k := l.Spec.(*model.Attention)
	a := &attnOp{k: k}
	a.window, _ = k.SlidingAt(s.layerAt)
	a.rope = k.RoPEAt(s.layerAt)
	if k.RoPE && k.Style == "hf" {
		// The model's rotary embedding module: inv_freq and
		// original_inv_freq, fp32 buffers of half the rotated dims,
		// moved to the device with the model (ddp.go broadcasts them).
		s.rotaryElems = a.ropeWidth() / 2
	}
	if k.MLA != nil {
		a.buildMLA(s) // mla.go
		return a
	}
	q, kv := k.Heads*k.HeadDim, k.KVHeads*k.HeadDim
	outProj := func() {
		a.o, a.oB = s.matrix(k.Dim, q, 1, "o.weight"), s.optParam(k.OutBias, k.Dim, "o.bias")
	}
	first := len(s.params)
	if k.Style == "torch" || k.OutFirst {
		// nn.MultiheadAttention's out_proj is a child module, and
		// Module.to() moves children's parameters before the module's
		// own (in_proj_weight, in_proj_bias), while parameters() lists
		// the module's own first, which the optimizer's state follows
		// (measured: ViT-B/16's load and first step,
		// bench/results/2026-11-23-h100-traces2/vit-ckpt). Phi-3's
		// o_proj is registered first: both orders start with it
		// (measured: FSDP2's unshard of each block,
		// bench/results/2026-11-29-h200-fake-47).
		outProj()
	}
	if k.FusedQKV || k.Style == "torch" {
		a.qkv, a.qkvB = s.matrix(q+2*kv, k.Dim, 1, "qkv.weight"), s.optParam(k.Bias, q+2*kv, "qkv.bias")
	} else {
		a.q, a.qB = s.matrix(q, k.Dim, 1, "q.weight"), s.optParam(k.Bias, q, "q.bias")
		a.kw, a.kB = s.matrix(kv, k.Dim, 1, "k.weight"), s.optParam(k.Bias, kv, "k.bias")
		a.v, a.vB = s.matrix(kv, k.Dim, 1, "v.weight"), s.optParam(k.Bias, kv, "v.bias")
	}
	if k.Style != "torch" {
		if !k.OutFirst {
			outProj()
		}
		if k.Sinks {
			a.sinks = s.param(k.Heads, "sinks") // registered after o_proj
		}
	} else {
		// parameters() order: in_proj first, then out_proj (a rotation
		// of the layer's parameters by out_proj's count).
		ps := s.params[first:]
		nOut := 1
		if a.oB != nil {
			nOut++
		}
		copy(ps, slices.Concat(ps[nOut:], ps[:nOut]))
	}
	switch {
	case k.QKNorm && k.QKNormWhole:
		// Whole under tensor parallelism (QKNormRanks): the norms run on
		// the sequence shard of the whole width.
		r := max(k.QKNormRanks, 1)
		a.qNorm, a.kNorm = s.param(q*r, "q_norm.weight"), s.param(kv*r, "k_norm.weight")
	case k.QKNorm:
		a.qNorm, a.kNorm = s.param(k.HeadDim, "q_norm.weight"), s.param(k.HeadDim, "k_norm.weight")
	}
	return a
}

// attnState is one forward's tensors; held are references kept until the
// module returns, dropped last-first.
type attnState struct {
	b, seq, rows int64
	q, k, v      *tensor
	held         []*tensor
	heldBuf      [8]*tensor // held's memory: q, k, v, a packed projection, Phi's four sliced rotary parts
}

// attnState returns the simulation's attention state, emptied for a
// forward over seq tokens: no attention forward runs inside another, so
// one serves them all without a heap object each.
func (s *sim) attnState(seq int64) *attnState {
	st := &s.attn
	*st = attnState{b: s.cfg.batch, seq: seq}
	st.held = st.heldBuf[:0]
	return st
}

func (a *attnOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	k := a.k
	st := s.attnState(sh[0])
	st.rows = st.b * st.seq
	if k.MLA != nil {
		return a.mlaForward(s, x, st)
	}
	a.project(s, x, st)
	switch {
	case a.rope:
		a.rotary(s, x, st)
	case k.RoPE && k.Style == "hf":
		// A NoPE layer's query_states stays bound until the module
		// returns, as the rotated one does (rotary).
		if k.Temperature {
			a.temperature(s, st) // rope.go
		}
		st.held = append(st.held, s.ref(st.q))
	}
	if a.cached(s) {
		a.kvCache(s, st)
	}
	if k.RoPE && k.Style == "hf" {
		// key_states and value_states, like query_states (rotary), stay
		// bound until the module returns, after the output projection;
		// a KV cache's update rebinds them to its own tensors first
		// (measured: the tiny MoE's traces, bench/results/moe-traces, and
		// Llama-3.2-1B eager, which frees the rotated key at the update).
		st.held = append(st.held, s.ref(st.k), s.ref(st.v))
	}
	y, mathSDPA := a.kernel(s, x, st)
	s.unref(st.q)
	s.unref(st.k)
	s.unref(st.v)
	if k.Style == "torch" && (s.cfg.eager || mathSDPA || s.cfg.compute == f32) {
		// permute(2, 0, 1, 3).contiguous() before out_proj copies, except
		// after half-precision fused SDPA: the cuDNN kernel writes its
		// output in the query's layout, which the permute makes contiguous
		// again, so .contiguous() returns it as is (measured: ViT-B/16
		// AMP, docs/accuracy.md).
		c := s.unary("Clone", y, false, false)
		s.unref(y)
		y = c
	}
	o := a.linear(s, y, a.o, a.oB, st.rows, k.Dim)
	// The output projection's input is a local the module rebinds to the
	// projection's result: inside a tensor-parallel module after
	// RowwiseParallel's output collective, which runs in the projection's
	// call (measured: Maverick's test shape at tp 2, checkpointed, its
	// attn_output freed after the all-reduce,
	// bench/results/2026-11-28-h200x2-tp-llama4/traces).
	s.atReturn(y)
	if k.OutDropout > 0 {
		d := s.dropout(o)
		s.unref(o)
		o = d
	}
	if k.Style == "torch" {
		// nn.MultiheadAttention(batch_first=True) returns the out_proj
		// result viewed as [seq, batch, dim] and transposed back to
		// [batch, seq, dim]: a view, not row-major. In backward the
		// gradient, row-major in [batch, seq, dim], comes back through
		// the transpose as a strided view, which the view's backward
		// (reshape) copies (measured: ViT-B/16,
		// bench/results/2026-11-23-h100-traces2).
		v := s.view(o, o.elems)
		v.perm = true
		s.record("ViewTranspose", []*tensor{o}, v)
		s.unref(o)
		o = v
	}
	for i := len(st.held) - 1; i >= 0; i-- {
		s.atReturn(st.held[i])
	}
	return o
}

// dropKVHold drops the key/value cache's copies (kvHold), as the model
// output that holds the cache is dropped.
func (s *sim) dropKVHold() {
	for _, t := range s.kvHold {
		s.unref(t)
	}
	s.kvHold = nil
}

// kvCache models transformers' GPT-2 keeping use_cache=True in training
// (it turns it off only under gradient checkpointing): DynamicCache.update
// concatenates k and v (after rotary embeddings) into the cache, and those
// copies are what attention receives and saves (measured:
// cache_utils.py:146-147 allocations in the allocator trace,
// docs/formulas.md §B). The cache's empty tensors take the key's dtype, so
// under autocast with rotary embeddings (fp32 keys) the value copy is
// promoted to fp32 as well (measured: Pythia, cache_utils.py:147).
func (a *attnOp) kvCache(s *sim, st *attnState) {
	// In backward each concatenation narrows its gradient (CatBackward0):
	// the key's is a view, the value's too, cast to the value's dtype when
	// the copy was promoted (measured: the tiny MoE in AMP,
	// bench/results/2026-11-23-h100-traces/moe-amp).
	k2 := s.alloc(st.k.elems, st.k.dt, catTemp, "CacheCat")
	if n := s.record("CacheCat", []*tensor{st.k}, k2); n != nil {
		n.split = true
	}
	v2 := s.alloc(st.v.elems, promote(st.v.dt, st.k.dt), catTemp, "CacheCat")
	if n := s.record("CacheCat", []*tensor{st.v}, v2); n != nil {
		n.split = true
	}
	s.unref(st.k)
	s.unref(st.v)
	st.k, st.v = k2, v2
	// The cache holds its copies until the model's outputs are dropped,
	// after the loss (Qwen3's trace frees them there).
	s.kvHold = append(s.kvHold, s.ref(st.k), s.ref(st.v))
}

// kernel runs the attention itself. In fp32 the fused SDPA choice is the
// memory-efficient kernel, which does not take enable_gqa: grouped-query
// attention falls back to the math kernel, which keeps the S×S
// probabilities like eager attention (measured: Llama-3.2-1B fp32,
// bench/results); mathSDPA reports that case.
func (a *attnOp) kernel(s *sim, x *tensor, st *attnState) (y *tensor, mathSDPA bool) {
	k := a.k
	mathSDPA = a.mathSDPA(s)
	switch {
	case a.ring != nil:
		return a.ring(s, st), false
	case a.masked(s, st.seq):
		y = s.maskedSDPA(st.q, st.k, st.v, st.b, k.Heads, k.KVHeads, st.seq, k.HeadDim)
		mathSDPA = false
	case mathSDPA:
		var probs *tensor
		y, probs = s.eagerAttention(st.q, st.k, st.v, nil, st.b, k.Heads, k.KVHeads, st.seq, k.HeadDim, k.P, model.SoftmaxFP32, 0, nil)
		s.unref(probs) // the math kernel's (output, attn) pair: SDPA returns the output only
	case s.cfg.eager:
		var mask *tensor
		switch {
		case a.window > 0 && s.mask2 != nil:
			mask = s.mask2 // a sliding layer beside full ones (prologue)
		case k.Causal:
			mask = s.causalMask(st.seq, x.dt)
		}
		var probs *tensor
		y, probs = s.eagerAttention(st.q, st.k, st.v, mask, st.b, k.Heads, k.KVHeads, st.seq, k.HeadDim, k.P, k.Softmax, k.Softcap, a.sinks)
		// The attention module returns its weights beside its output and
		// the decoder layer binds them (hidden_states, _ = self.self_attn(...)):
		// they live until the layer returns, through its MLP, which
		// matters when checkpointing saves nothing in the first forward
		// (measured: Gemma-2-2B eager bf16 checkpointed, freed at the
		// decoder layer's return, bench/results/2026-11-27-gemma-eager-traces).
		if k.Style == "hf" {
			s.unitHold = append(s.unitHold, probs)
		} else {
			s.unref(probs)
		}
	default:
		y = s.sdpa(st.q, st.k, st.v, st.b, k.Heads, st.seq, k.HeadDim)
		if a.rope && (k.Rotary > 0 && k.Rotary < 1 || k.RoPEConcat) && k.Style == "hf" {
			// Partial rotary concatenates q back into a head-major
			// tensor, so the fused kernel's output is head-major too and
			// transformers' transpose(1, 2).contiguous() copies it; the
			// copy is what the output projection saves (measured: Pythia,
			// sdpa_attention.py:168; Phi-3, whose apply_rotary_pos_emb
			// concatenates with an empty rest too,
			// bench/results/2026-11-27-h200x2-tp-families). With
			// whole-head rotary q keeps the projection's layout and the
			// copy is a no-op.
			c := s.contiguous(y)
			s.unref(y)
			y = c
		}
	}
	return y, mathSDPA
}

// prologue is what a transformers decoder's forward does between its
// embedding and its first block, sized by the first attention layer in
// blocks that applies rotary embeddings in transformers' style: eager
// attention's causal mask (create_causal_mask), then the rotary tables
// (LlamaRotaryEmbedding.forward: an fp32 matmul with autocast off, the
// first product of the step's forward, which creates the thread's cuBLAS
// workspace, then cos and sin in x's dtype). Measured: the Llama-3.2-1B
// eager and tiny MoE traces (bench/results/2026-11-23-h100-traces), where
// the mask and the 32 MiB workspace come before the first RMSNorm.
func (s *sim) prologue(blocks []*inst, x *tensor, sh model.Shape) {
	a := firstRope(blocks)
	if a == nil || len(sh) == 0 {
		return
	}
	seq := sh[0] * max(s.wholeSeq, 1)
	switch {
	case s.cfg.eager && a.k.Causal:
		s.causalMask(seq, x.dt)
		if sliding, full := modelWindowKinds(blocks); sliding && full {
			// Gemma 2's causal_mask_mapping: a full and a sliding
			// mask, each materialised under eager attention (from
			// transformers' source; measured: held-out set 21).
			s.mask2 = s.eagerMask(s.slidingBool(seq, firstWindowed(blocks)), seq, s.mask.dt, "sliding mask (eager)")
		}
		// A local of the model's forward, dropped when it returns
		// (dropBodyHold); with checkpointing each segment's frame keeps
		// the masks its layers take until its backward (segmentMasks),
		// and the last frame to die frees them (measured: Llama 4's
		// pipeline stages, whose shape inference, run without frames,
		// frees the mask as the base model returns, before the head;
		// bench/results/2026-11-28-h200x2-heldout-53, the thirty-sixth
		// session).
		s.maskLocal = true
	case maskedIn(s, blocks, seq):
		s.mask = s.slidingBool(seq, firstWindowed(blocks))
		s.maskLocal = true // as eager's
	}
	if m := a.k.MLA; m != nil && m.Complex {
		s.ropeBuildComplex(seq, m.Rope)
		return
	}
	if a.k.RoPEComplex {
		s.ropeBuildComplex(seq, a.k.HeadDim) // Llama 4's
		return
	}
	dt := a.ropeDt(x)
	s.ropeInputsFP32 = dt == f32 && x.dt != f32 // OLMo's, under FSDP2's bf16 policy cast per unit (castRope)
	s.ropeBuild(seq, a.ropeWidth(), dt, false, a.k.RoPEHalves)
	if a.k.LocalRoPE {
		// Gemma 3's second rotary embedding, for the sliding layers,
		// computed after the global one.
		s.ropeBuild(seq, a.ropeWidth(), dt, true, a.k.RoPEHalves)
	}
}

// dropMasks drops the current forward's attention masks (mask, mask2).
func (s *sim) dropMasks() {
	s.unref(s.mask)
	s.unref(s.mask2)
	s.mask, s.mask2 = nil, nil
}

// causalMask is the additive [batch, 1, seq, seq] mask transformers builds
// once per forward for eager attention, in the model's dtype.
func (s *sim) causalMask(seq, dt int64) *tensor {
	if s.mask == nil {
		s.mask = s.eagerMask(s.alloc(seq*seq, 1, catTemp, "causal mask (bool)"), seq, dt, "causal mask")
	}
	return s.mask
}

// eagerMask is transformers' eager_mask over sdpa_mask's boolean mask
// ([1, 1, seq, seq], expanded over the batch as a view, or Llama 4's
// chunked one, made per sample): torch.where materialises the additive
// mask for each sequence of the batch, [batch, 1, seq, seq], and the
// boolean goes when eager_mask returns (measured: masking_utils.py:81 and
// 604 in the Llama-3.2-1B, OLMo-1B, GPT-2, Pythia and Gemma 2 eager
// histories; its placement moved Llama-3.2-1B's reserved memory by 12% at
// 2 × 2,048 tokens, bench/results/2026-11-27-h200-eagercopy-traces). It
// consumes b.
func (s *sim) eagerMask(b *tensor, seq, dt int64, name string) *tensor {
	m := s.alloc(s.cfg.batch*seq*seq, dt, catTemp, name)
	s.unref(b)
	return m
}

// linear is one of the attention's projections: a Conv1D's
// (model.Attention.Conv1D) or nn.Linear's.
func (a *attnOp) linear(s *sim, x, w, b *tensor, rows, out int64) *tensor {
	if a.k.Conv1D {
		return s.matmulConv1D(x, w, b, rows, out)
	}
	return s.matmul(x, w, b, rows, out)
}

package estimate

import (
	"math"

	"github.com/memplan/memplan/model"
)

// inst is a layer instance with its own parameters: a repeat of n blocks
// becomes n instances.
type inst struct {
	l     *model.Layer
	p     []*tensor // parameters in a kind-specific order (see build)
	norm  []*tensor // per-head q and k norm weights (attention with QKNorm)
	fork  [][]*inst // a fork's branches
	body  []*inst
	short []*inst
	unit  bool // one checkpointing unit (a block, or one copy of a repeat)
}

// param allocates a trainable parameter, as model.to("cuda") does: one
// allocation per tensor.
func (s *sim) param(elems int64, name string) *tensor {
	var t *tensor
	if s.cfg.zero >= 2 {
		// ZeRO-2 and 3 (FSDP): the GPU keeps this rank's shard; whole
		// tensors exist only while gathered (shardSetup).
		t = &tensor{elems: elems, dt: s.cfg.param, refs: 1, fixed: catParam, cat: catParam, name: name}
		if s.cfg.offload != model.OffloadParams {
			s.alloc(s.shard(elems), s.cfg.param, catParam, name+" shard")
		}
	} else {
		t = s.alloc(elems, s.cfg.param, catParam, name)
	}
	t.param, t.req = true, true
	s.params = append(s.params, t)
	return t
}

// matrix allocates a parameter of shape [..., second, last].
func (s *sim) matrix(second, last, lead int64, name string) *tensor {
	t := s.param(lead*second*last, name)
	t.second, t.last = second, last
	return t
}

// buffer allocates a module buffer held for the whole run.
func (s *sim) buffer(elems int64, name string) {
	s.alloc(elems, f32, catParam, name)
}

func (s *sim) build(ls []model.Layer, names map[string]*tensor) []*inst {
	var out []*inst
	for i := range ls {
		l := &ls[i]
		in := &inst{l: l}
		opt := func(ok bool, n int64, name string) *tensor {
			if !ok {
				return nil
			}
			return s.param(n, name)
		}
		switch l.Kind {
		case model.KLinear:
			in.p = []*tensor{s.matrix(l.Out, l.In, 1, "linear.weight"), opt(l.Bias, l.Out, "linear.bias")}
		case model.KConv2d:
			in.p = []*tensor{s.matrix(l.Kernel, l.Kernel, l.Out*l.In, "conv.weight"), opt(l.Bias, l.Out, "conv.bias")}
		case model.KBatchNorm:
			in.p = []*tensor{s.param(l.Channels, "bn.weight"), s.param(l.Channels, "bn.bias")}
			s.buffer(l.Channels, "bn.running_mean")
			s.buffer(l.Channels, "bn.running_var")
			s.buffer(2, "bn.num_batches_tracked")
		case model.KLayerNorm:
			in.p = []*tensor{s.param(l.Dim, "ln.weight"), opt(l.Bias, l.Dim, "ln.bias")}
		case model.KRMSNorm:
			in.p = []*tensor{s.param(l.Dim, "rmsnorm.weight")}
		case model.KEmbedding:
			in.p = []*tensor{s.matrix(l.Vocab, l.Dim, 1, "embedding.weight")}
			if l.Name != "" {
				names[l.Name] = in.p[0]
			}
		case model.KPositions, model.KTokenTypes:
			in.p = []*tensor{s.matrix(l.Max, l.Dim, 1, l.Kind+".weight")}
		case model.KAttention:
			q, kv := l.Heads*l.HeadDim, l.KVHeads*l.HeadDim
			if l.FusedQKV || l.Style == "torch" {
				in.p = []*tensor{s.matrix(q+2*kv, l.Dim, 1, "qkv.weight"), opt(l.Bias, q+2*kv, "qkv.bias")}
			} else {
				in.p = []*tensor{s.matrix(q, l.Dim, 1, "q.weight"), opt(l.Bias, q, "q.bias"),
					s.matrix(kv, l.Dim, 1, "k.weight"), opt(l.Bias, kv, "k.bias"),
					s.matrix(kv, l.Dim, 1, "v.weight"), opt(l.Bias, kv, "v.bias")}
			}
			in.p = append(in.p, s.matrix(l.Dim, q, 1, "o.weight"), opt(l.OutBias, l.Dim, "o.bias"))
			if l.QKNorm {
				in.norm = []*tensor{s.param(l.HeadDim, "q_norm.weight"), s.param(l.HeadDim, "k_norm.weight")}
			}
		case model.KGatedMLP:
			in.p = []*tensor{s.matrix(l.Hidden, l.Dim, 1, "gate.weight"), opt(l.Bias, l.Hidden, "gate.bias"),
				s.matrix(l.Hidden, l.Dim, 1, "up.weight"), opt(l.Bias, l.Hidden, "up.bias"),
				s.matrix(l.Dim, l.Hidden, 1, "down.weight"), opt(l.Bias, l.Dim, "down.bias")}
		case model.KMoE:
			in.p = []*tensor{s.matrix(l.Experts, l.Dim, 1, "router.weight")}
			for e := int64(0); e < l.Experts; e++ {
				in.p = append(in.p, s.matrix(l.Hidden, l.Dim, 1, "expert.gate"), opt(l.Bias, l.Hidden, "expert.gate.bias"),
					s.matrix(l.Hidden, l.Dim, 1, "expert.up"), opt(l.Bias, l.Hidden, "expert.up.bias"),
					s.matrix(l.Dim, l.Hidden, 1, "expert.down"), opt(l.Bias, l.Dim, "expert.down.bias"))
			}
			if l.Shared > 0 {
				in.norm = []*tensor{s.matrix(l.Shared, l.Dim, 1, "shared.gate"), nil, s.matrix(l.Shared, l.Dim, 1, "shared.up"), nil,
					s.matrix(l.Dim, l.Shared, 1, "shared.down"), nil}
				if l.SharedGate {
					in.norm = append(in.norm, s.matrix(1, l.Dim, 1, "shared_expert_gate"))
				}
			}
		case model.KPatchEmbed:
			in.p = []*tensor{s.matrix(l.Kernel, l.Kernel, l.Dim*l.Channels, "patch.weight"), s.param(l.Dim, "patch.bias")}
		case model.KClsToken:
			in.p = []*tensor{s.param(l.Dim, "class_token")}
		case model.KLMHead:
			w := names[l.Tie]
			if l.Tie == "" || w == nil {
				w = s.matrix(l.Vocab, l.Dim, 1, "lm_head.weight")
			}
			in.p = []*tensor{w, opt(l.Bias, l.Vocab, "lm_head.bias")}
		case model.KRepeat:
			for j := int64(0); j < l.Times; j++ {
				in := &inst{l: &model.Layer{Kind: model.KBlock, Body: l.Body}, unit: true}
				in.body = s.build(l.Body, names)
				out = append(out, in)
			}
			continue
		case model.KBlock:
			in.unit = true
			in.body = s.build(l.Body, names)
		case model.KResidual:
			in.body = s.build(l.Body, names)
			in.short = s.build(l.Shortcut, names)
		case model.KFork:
			for _, b := range l.Branches {
				in.fork = append(in.fork, s.build(b, names))
			}
		}
		out = append(out, in)
	}
	return out
}

// run executes instances in order. It takes over the caller's hold on x
// and returns a tensor the caller holds.
func (s *sim) run(ins []*inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	for i := 0; i < len(ins); {
		if !ins[i].unit || s.ckptMode == model.CkptNone {
			x, sh = s.step1(ins[i], x, sh)
			i++
			continue
		}
		j := i
		for j < len(ins) && ins[j].unit {
			j++
		}
		for _, seg := range s.segments(j - i) {
			units := ins[i+seg.start : i+seg.end]
			if seg.ckpt {
				x, sh = s.checkpointed(units, x, sh)
			} else {
				x, sh = s.plain(units, x, sh)
			}
		}
		i = j
	}
	return x, sh
}

// plain runs instances one after the other with no checkpointing.
func (s *sim) plain(ins []*inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	for _, in := range ins {
		x, sh = s.step1(in, x, sh)
	}
	return x, sh
}

func (s *sim) step1(in *inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	y, out := s.layer(in, x, sh)
	s.unref(x)
	return y, out
}

type span struct {
	start, end int
	ckpt       bool
}

// segments splits n consecutive units per the checkpointing mode: each unit
// (every-block), groups of k (every-k), or checkpoint_sequential's
// round(√n) segments, whose last segment is not checkpointed.
func (s *sim) segments(n int) []span {
	var out []span
	switch s.ckptMode {
	case model.CkptBlock, model.CkptEveryK:
		k := int(s.ckptK)
		if s.ckptMode == model.CkptBlock {
			k = 1
		}
		for a := 0; a < n; a += k {
			out = append(out, span{a, min(a+k, n), true})
		}
	case model.CkptSqrt:
		segs := max(1, int(math.Round(math.Sqrt(float64(n)))))
		size := n / segs
		a := 0
		for ; a < size*(segs-1); a += size {
			out = append(out, span{a, a + size, true})
		}
		out = append(out, span{a, n, false})
	}
	return out
}

// checkpointed runs units under torch.utils.checkpoint (non-reentrant):
// nothing inside is saved; the segment keeps its input and recomputes in
// backward.
func (s *sim) checkpointed(units []*inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	var outSh model.Shape
	run := func(in *tensor) *tensor {
		y, o := s.plain(units, s.ref(in), sh)
		outSh = o
		return y
	}
	start, saving := len(s.tape), s.saving
	s.saving = false
	y := run(x)
	s.saving = saving
	s.tape = s.tape[:start]
	y.req = true
	n := &node{name: "Checkpoint", outs: []*tensor{y}, ckpt: &ckpt{run: run}}
	if x.req {
		n.ins = []*tensor{x}
	}
	s.save(n, x)
	s.tape = append(s.tape, n)
	s.unref(x)
	return y, outSh
}

func (s *sim) rows(sh model.Shape) int64 { return s.cfg.batch * sh.Elems() / sh[len(sh)-1] }

// layer runs one instance; x stays held by the caller.
func (s *sim) layer(in *inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	l, b := in.l, s.cfg.batch
	out, _ := l.Infer(sh, map[string]*model.Layer{l.Tie: {Vocab: l.Vocab, Dim: l.Dim}})
	switch l.Kind {
	case model.KLinear:
		return s.matmul(x, in.p[0], in.p[1], s.rows(sh), l.Out), out
	case model.KConv2d:
		g := convGeom{in: l.In, out: l.Out, kernel: l.Kernel, stride: l.Stride, padding: l.Padding, h: sh[1], w: sh[2]}
		return s.conv2d(x, in.p[0], in.p[1], b*out.Elems(), g), out
	case model.KBatchNorm:
		return s.batchNorm(x, in.p[0], in.p[1], l.Channels), out
	case model.KLayerNorm:
		return s.layerNorm(x, in.p[0], in.p[1], s.rows(sh)), out
	case model.KRMSNorm:
		return s.rmsNorm(x, in.p[0], s.rows(sh)), out
	case model.KReLU, model.KGELU, model.KGELUNew, model.KSiLU, model.KTanh:
		return s.activation(l.Kind, x, l.Inplace), out
	case model.KDropout:
		if l.P == 0 {
			return s.ref(x), out
		}
		return s.dropout(x), out
	case model.KEmbedding:
		return s.embedding(x, in.p[0], b*sh[0], l.Dim), out
	case model.KPositions, model.KTokenTypes:
		// wpe(position_ids) is [1, seq, dim], broadcast over the batch;
		// token types look up a [batch, seq] index.
		rows := sh[0]
		if l.Kind == model.KTokenTypes {
			rows *= b
		}
		ids := &tensor{elems: rows, dt: i64, refs: 1}
		e := s.embedding(ids, in.p[0], rows, l.Dim)
		y := s.add(x, e)
		s.unref(e)
		return y, out
	case model.KAttention:
		return s.attention(in, x, sh), out
	case model.KGatedMLP:
		return s.gatedMLP(x, in.p, s.rows(sh), l.Hidden, l.Dim, l.Activation), out
	case model.KMoE:
		return s.moe(in, x, s.rows(sh)), out
	case model.KMaxPool:
		return s.maxPool(x, b*out.Elems()), out
	case model.KAvgPool:
		y := s.alloc(b*out.Elems(), x.dt, catTemp, "avgpool")
		s.record("Mean", []*tensor{x}, y)
		return y, out
	case model.KFlatten:
		return s.ref(x), out
	case model.KPatchEmbed:
		g := convGeom{in: l.Channels, out: l.Dim, kernel: l.Kernel, stride: l.Kernel, h: sh[1], w: sh[2]}
		return s.conv2d(x, in.p[0], in.p[1], b*out.Elems(), g), out
	case model.KClsToken:
		y := s.alloc(b*out.Elems(), promote(x.dt, in.p[0].dt), catTemp, "cat class token")
		s.record("Cat", []*tensor{in.p[0], x}, y)
		return y, out
	case model.KTakeCls:
		v := s.view(x, b*out.Elems())
		s.record("Select", []*tensor{x}, v)
		return v, out
	case model.KLMHead:
		return s.lmHead(in, x, sh), scalarShape
	case model.KBlock:
		return s.run(in.body, s.ref(x), sh)
	case model.KFork:
		var sum *tensor
		var o model.Shape
		for _, b := range in.fork {
			y, so := s.run(b, s.ref(x), sh)
			o = so
			if sum == nil {
				sum = y
				continue
			}
			z := s.add(sum, y)
			s.unref(sum)
			s.unref(y)
			sum = z
		}
		return sum, o
	case model.KResidual:
		br, o := s.run(in.body, s.ref(x), sh)
		sk := s.ref(x)
		if len(in.short) > 0 {
			s.unref(sk)
			sk, _ = s.run(in.short, s.ref(x), sh)
		}
		var y *tensor
		if l.Inplace && br.elems == sk.elems {
			y = s.view(br, br.elems)
			if n := s.record("AddInplace", []*tensor{br, sk}, y); n != nil {
				n.pass = true
			}
		} else {
			y = s.add(sk, br)
		}
		s.unref(br)
		s.unref(sk)
		return y, o
	}
	panic("estimate: unhandled layer " + l.Kind)
}

// scalarShape marks a scalar loss.
var scalarShape = model.Shape{1}

func (s *sim) attention(in *inst, x *tensor, sh model.Shape) *tensor {
	l, b := in.l, s.cfg.batch
	S := sh[0]
	rows := b * S
	qd, kvd := l.Heads*l.HeadDim, l.KVHeads*l.HeadDim
	var q, k, v *tensor
	po := len(in.p) - 2
	switch {
	case l.Style == "torch":
		// nn.MultiheadAttention(batch_first=True) transposes its input to
		// [seq, batch, dim]; F.linear on that view copies it to a
		// contiguous matrix, which the in_proj saves instead of x (the
		// copy's backward is a view: the gradient passes). Then
		// unflatten/transpose/contiguous copies the projection; q, k, v
		// are views of it.
		// Under autocast the cast to half comes first and keeps the
		// transposed layout; the copy is of the half tensor.
		xh := s.castLow(x)
		xc := s.contiguous(xh)
		s.unref(xh)
		proj := s.matmul(xc, in.p[0], in.p[1], rows, qd+2*kvd)
		s.unref(xc)
		c := s.unary("Clone", proj, false, false)
		s.unref(proj)
		q, k, v = s.split(c, qd, kvd, rows)
		s.unref(c)
	case l.FusedQKV:
		qkv := s.matmul(x, in.p[0], in.p[1], rows, qd+2*kvd)
		q, k, v = s.split(qkv, qd, kvd, rows)
		// transformers keeps the packed projection in a local variable
		// until the attention module returns (measured: GPT-NeoX frees it
		// at module return, after the output projection).
		defer s.unref(qkv)
	default:
		q = s.matmul(x, in.p[0], in.p[1], rows, qd)
		k = s.matmul(x, in.p[2], in.p[3], rows, kvd)
		v = s.matmul(x, in.p[4], in.p[5], rows, kvd)
	}
	if l.QKNorm {
		// Qwen3: RMSNorm over head_dim on every query and key head.
		q2 := s.rmsNorm(q, in.norm[0], rows*l.Heads)
		k2 := s.rmsNorm(k, in.norm[1], rows*l.KVHeads)
		s.unref(q)
		s.unref(k)
		q, k = q2, k2
	}
	if l.RoPE {
		frac := 1.0
		if l.Rotary > 0 {
			frac = l.Rotary
		}
		cos, sin := s.ropeTables(S, int64(frac*float64(l.HeadDim)), x.dt)
		q2, k2 := s.rope(q, cos, sin, frac), s.rope(k, cos, sin, frac)
		s.unref(q)
		s.unref(k)
		q, k = q2, k2
		if l.Style == "hf" {
			// query_states stays referenced until the module returns.
			defer s.unref(s.ref(q))
		}
	}
	if l.KVCache && s.ckptMode == model.CkptNone {
		// transformers' GPT-2 keeps use_cache=True in training (it turns
		// it off only under gradient checkpointing): DynamicCache.update
		// concatenates k and v (after rotary embeddings) into the cache, and those copies are what
		// attention receives and saves (measured: cache_utils.py:146-147
		// allocations in the allocator trace, docs/formulas.md §B).
		// The cache's empty tensors take the key's dtype, so under
		// autocast with rotary embeddings (fp32 keys) the value copy is
		// promoted to fp32 as well (measured: Pythia, cache_utils.py:147).
		k2 := s.unary("CacheCat", k, false, false)
		v2 := s.alloc(v.elems, promote(v.dt, k.dt), catTemp, "CacheCat")
		s.record("CacheCat", []*tensor{v}, v2)
		s.unref(k)
		s.unref(v)
		k, v = k2, v2
		// The cache holds its copies until the model's outputs are
		// dropped, after the loss (Qwen3's trace frees them there).
		s.kvHold = append(s.kvHold, s.ref(k), s.ref(v))
	}
	var y *tensor
	// In fp32 the fused SDPA choice is the memory-efficient kernel, which
	// does not take enable_gqa: grouped-query attention falls back to the
	// math kernel, which keeps the S×S probabilities like eager attention
	// (measured: Llama-3.2-1B fp32, bench/results).
	mathSDPA := !s.cfg.eager && s.cfg.compute == f32 && l.KVHeads != l.Heads
	if mathSDPA {
		y = s.eagerAttention(q, k, v, nil, b, l.Heads, l.KVHeads, S, l.HeadDim, l.P)
	} else if s.cfg.eager {
		var mask *tensor
		if l.Causal {
			mask = s.causalMask(S, x.dt)
		}
		y = s.eagerAttention(q, k, v, mask, b, l.Heads, l.KVHeads, S, l.HeadDim, l.P)
	} else {
		y = s.sdpa(q, k, v, b, l.Heads, S, l.HeadDim)
		if l.RoPE && l.Rotary > 0 && l.Rotary < 1 && l.Style == "hf" {
			// Partial rotary concatenates q back into a head-major
			// tensor, so the fused kernel's output is head-major too and
			// transformers' transpose(1, 2).contiguous() copies it; the
			// copy is what the output projection saves (measured: Pythia,
			// sdpa_attention.py:168). With whole-head rotary q keeps the
			// projection's layout and the copy is a no-op.
			c := s.contiguous(y)
			s.unref(y)
			y = c
		}
	}
	s.unref(q)
	s.unref(k)
	s.unref(v)
	if l.Style == "torch" && (s.cfg.eager || mathSDPA || s.cfg.compute == f32) {
		// permute(2, 0, 1, 3).contiguous() before out_proj copies, except
		// after half-precision fused SDPA: the cuDNN kernel writes its
		// output in the query's layout, which the permute makes contiguous
		// again, so .contiguous() returns it as is (measured: ViT-B/16
		// AMP, docs/accuracy.md).
		c := s.unary("Clone", y, false, false)
		s.unref(y)
		y = c
	}
	o := s.matmul(y, in.p[po], in.p[po+1], rows, l.Dim)
	s.unref(y)
	// nn.MultiheadAttention(batch_first=True) returns the out_proj result
	// transposed back to [batch, seq, dim]: a view, not row-major.
	o.perm = l.Style == "torch"
	return o
}

// split makes q, k, v views of a packed projection; its backward builds
// one gradient of the packed size.
func (s *sim) split(c *tensor, qd, kvd, rows int64) (q, k, v *tensor) {
	q, k, v = s.view(c, rows*qd), s.view(c, rows*kvd), s.view(c, rows*kvd)
	s.record("Split", []*tensor{c}, q, k, v)
	return
}

// ropeTables returns the cos and sin tables ([1, seq, head_dim] in the
// stream's dtype), made once per forward like transformers'
// LlamaRotaryEmbedding.
func (s *sim) ropeTables(seq, hd, dt int64) (cos, sin *tensor) {
	if s.ropeT[0] == nil {
		s.ropeT[0] = s.alloc(seq*hd, dt, catTemp, "rope cos")
		s.ropeT[1] = s.alloc(seq*hd, dt, catTemp, "rope sin")
	}
	return s.ropeT[0], s.ropeT[1]
}

// rope is apply_rotary_pos_emb for one tensor: x·cos + rotate_half(x)·sin.
// Under autocast x is half and cos fp32, so the result is fp32. With a
// fraction below 1 (GPT-NeoX's rotary_pct) only the first part of each
// head is rotated and the result is concatenated back with the rest.
func (s *sim) rope(x, cos, sin *tensor, frac float64) *tensor {
	xr := x
	partial := frac < 1
	if partial {
		xr = s.view(x, int64(frac*float64(x.elems)))
		s.record("Slice", []*tensor{x}, xr)
	}
	a := s.mul(xr, cos)
	neg := s.alloc(xr.elems/2, x.dt, catTemp, "neg")
	s.record("Neg", []*tensor{xr}, neg)
	rh := s.alloc(xr.elems, x.dt, catTemp, "rotate_half")
	s.record("Cat", []*tensor{neg, xr}, rh)
	s.unref(neg)
	bb := s.mul(rh, sin)
	s.unref(rh)
	y := s.add(a, bb)
	s.unref(a)
	s.unref(bb)
	if !partial {
		return y
	}
	pass := s.view(x, x.elems-xr.elems)
	s.record("Slice", []*tensor{x}, pass)
	full := s.alloc(x.elems, promote(y.dt, x.dt), catTemp, "rope cat")
	s.record("Cat", []*tensor{y, pass}, full)
	s.unref(y)
	s.unref(pass)
	s.unref(xr)
	return full
}

// causalMask is the additive [batch, 1, seq, seq] mask transformers builds
// once per forward for eager attention, in the model's dtype.
func (s *sim) causalMask(seq, dt int64) *tensor {
	if s.mask == nil {
		s.mask = s.alloc(s.cfg.batch*seq*seq, dt, catTemp, "causal mask")
	}
	return s.mask
}

// lmHead computes logits and the loss. With upcast (transformers' causal
// LM loss) the logits are cast to fp32 first and the labels are shifted
// with a pad and a contiguous copy.
func (s *sim) lmHead(in *inst, x *tensor, sh model.Shape) *tensor {
	l := in.l
	rows := s.rows(sh)
	logits := s.matmul(x, in.p[0], in.p[1], rows, l.Vocab)
	if l.Softcap > 0 {
		// logits / cap; tanh (saves its output); · cap.
		a := s.scalarOp(logits)
		s.unref(logits)
		t := s.unary("Tanh", a, false, true)
		s.unref(a)
		logits = s.scalarOp(t)
		s.unref(t)
	}
	src := s.ref(logits)
	var labels [2]*tensor
	if l.Upcast {
		s.unref(src)
		src = s.to(logits, f32)
		labels[0] = s.alloc(rows+s.cfg.batch, i64, catTemp, "padded labels")
		labels[1] = s.alloc(rows, i64, catTemp, "shift labels")
	}
	loss := s.crossEntropy(src, rows)
	s.unref(src)
	s.unref(labels[0])
	s.unref(labels[1])
	s.unref(logits)
	return loss
}

// gatedMLP is down(act(gate(x)) * up(x)) over rows; p holds gate, up and
// down weights, each followed by its bias (or nil).
func (s *sim) gatedMLP(x *tensor, p []*tensor, rows, hidden, dim int64, act string) *tensor {
	g := s.matmul(x, p[0], p[1], rows, hidden)
	a := s.activation(act, g, false)
	s.unref(g)
	u := s.matmul(x, p[2], p[3], rows, hidden)
	m := s.mul(a, u)
	s.unref(a)
	s.unref(u)
	y := s.matmul(m, p[4], p[5], rows, dim)
	s.unref(m)
	return y
}

// moe is a mixture-of-experts MLP as transformers' eager loop runs it
// (MixtralSparseMoeBlock and its Qwen variants): a router, an fp32
// softmax, top-k, a one-hot int64 mask, then for each expert the rows
// routed to it are gathered, pass its gated MLP, are scaled by their
// routing weight and index_add_-ed into the output. Routing is taken as
// balanced: each expert gets rows·top_k/experts rows. Not yet measured
// (docs/formulas.md §B).
func (s *sim) moe(in *inst, x *tensor, rows int64) *tensor {
	l := in.l
	logits := s.matmul(x, in.p[0], nil, rows, l.Experts)
	l32 := s.to(logits, f32)
	s.unref(logits)
	probs := s.unary("Softmax", l32, false, true)
	s.unref(l32)
	w := s.alloc(rows*l.TopK, f32, catTemp, "topk weights")
	idx := s.alloc(rows*l.TopK, i64, catTemp, "topk indices")
	if n := s.record("Topk", []*tensor{probs}, w); n != nil {
		s.save(n, idx)
	}
	s.unref(probs)
	wc := s.to(w, x.dt)
	s.unref(w)
	mask := s.alloc(l.Experts*l.TopK*rows, i64, catTemp, "expert mask")
	y := s.alloc(rows*l.Dim, x.dt, catTemp, "moe out")
	per := (rows*l.TopK + l.Experts - 1) / l.Experts
	for e := int64(0); e < l.Experts; e++ {
		cur := s.alloc(per*l.Dim, x.dt, catTemp, "routed rows")
		if n := s.record("Index", []*tensor{x}, cur); n != nil {
			n.bwdTemp = per * i64
		}
		o := s.gatedMLP(cur, in.p[1+6*e:7+6*e], per, l.Hidden, l.Dim, l.Activation)
		s.unref(cur)
		rw := s.alloc(per, wc.dt, catTemp, "routing weight")
		s.record("Index", []*tensor{wc}, rw)
		scaled := s.mul(o, rw)
		s.unref(o)
		s.unref(rw)
		sc := s.to(scaled, x.dt)
		s.unref(scaled)
		// index_add_ is in place: each call is a new version of y whose
		// gradient passes to the previous version and is gathered for sc.
		next := s.view(y, y.elems)
		if n := s.record("IndexAdd", []*tensor{y, sc}, next); n != nil {
			n.pass = true
			s.save(n, idx)
		}
		s.unref(y)
		s.unref(sc)
		y = next
	}
	s.unref(mask)
	s.unref(wc)
	s.unref(idx)
	if l.Shared > 0 {
		sh := s.gatedMLP(x, in.norm[:6], rows, l.Shared, l.Dim, l.Activation)
		if l.SharedGate {
			g := s.matmul(x, in.norm[6], nil, rows, 1)
			sg := s.unary("Sigmoid", g, false, true)
			s.unref(g)
			m := s.mul(sg, sh)
			s.unref(sg)
			s.unref(sh)
			sh = m
		}
		z := s.add(y, sh)
		s.unref(y)
		s.unref(sh)
		y = z
	}
	return y
}

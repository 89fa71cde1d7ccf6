package estimate

import "github.com/memplan/memplan/model"

// Normalisation layers.

func init() {
	register(model.KBatchNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.BatchNorm)
		o := &batchNormOp{k: k, w: s.param(k.Channels, "bn.weight"), b: s.param(k.Channels, "bn.bias")}
		s.buffer(k.Channels, f32, "bn.running_mean")
		s.buffer(k.Channels, f32, "bn.running_var")
		s.buffer(1, i64, "bn.num_batches_tracked")
		return o
	})
	register(model.KLayerNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.LayerNorm)
		if k.Plain {
			return &layerNormOp{plain: true}
		}
		return &layerNormOp{w: s.param(k.Dim, "ln.weight"), b: s.optParam(k.Bias, k.Dim, "ln.bias")}
	})
	register(model.KRMSNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.RMSNorm)
		return &rmsNormOp{w: s.param(k.Dim, "rmsnorm.weight"), offset: k.Offset, fp32Product: k.FP32Product, centered: k.Centered,
			weightLast: k.WeightLast}

	})
}

type batchNormOp struct {
	k    *model.BatchNorm
	w, b *tensor
}

func (o *batchNormOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	return s.batchNorm(x, o.w, o.b, o.k.Channels)
}

type layerNormOp struct {
	w, b  *tensor
	plain bool // OlmoLayerNorm (model.LayerNorm.Plain)
}

func (o *layerNormOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	if o.plain {
		return s.plainLayerNorm(x, s.rows(sh))
	}
	return s.layerNorm(x, o.w, o.b, s.rows(sh))
}

// plainLayerNorm is OLMo's OlmoLayerNorm: F.layer_norm(x.to(fp32), shape,
// None, None).to(x.dtype): the fp32 copy, a temporary argument that only
// layer_norm's saving keeps, the fp32 output, and its cast back
// (modeling_olmo.py).
func (s *sim) plainLayerNorm(x *tensor, rows int64) *tensor {
	h := s.to(x, f32)
	y := s.layerNorm(h, nil, nil, rows)
	s.unref(h)
	out := s.to(y, x.dt)
	s.unref(y)
	return out
}

type rmsNormOp struct {
	w           *tensor
	offset      bool // GemmaRMSNorm (model.RMSNorm.Offset)
	fp32Product bool // Olmo2RMSNorm (model.RMSNorm.FP32Product)
	centered    bool // CohereLayerNorm (model.RMSNorm.Centered)
	weightLast  bool // Llama4TextRMSNorm's output * weight (model.RMSNorm.WeightLast)
}

func (o *rmsNormOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	if !s.tpSP || s.dtStream() {
		// A local input, or a DTensor already (the residual stream of a
		// model run through transformers' forward), whose rows are
		// DTensors as the output is: Cohere's parallel block gathers the
		// one norm's output for each branch.
		y := o.norm(s, x, sh)
		y.dtAct = x.dtAct
		return y
	}
	xd := s.seqParallelInput(x)
	y := o.norm(s, xd, sh)
	s.unref(xd)
	return y
}

func (o *rmsNormOp) norm(s *sim, x *tensor, sh model.Shape) *tensor {
	if o.centered {
		return s.cohereLayerNorm(x, o.w, s.rows(sh))
	}
	if o.weightLast {
		return s.rmsNormWeighted(x, o.w, s.rows(sh), true)
	}
	return s.rmsNormOf(x, o.w, s.rows(sh), o.offset, o.fp32Product)
}

// cohereLayerNorm is transformers' CohereLayerNorm, written out in Python:
// h = x.to(fp32); mean = h.mean(-1); variance = (h - mean).pow(2).mean(-1);
// h = (h - mean) · rsqrt(variance + ε), the difference made a second time;
// then weight.to(fp32) · h, cast back to x's dtype (modeling_cohere.py).
// The power saves the first difference and the product the second and the
// normalised rows, all fp32; mean and variance are locals, freed as it
// returns.
func (s *sim) cohereLayerNorm(x, w *tensor, rows int64) *tensor {
	h := s.to(x, f32)
	mean := s.alloc(rows, f32, catTemp, "mean")
	h.dtAct, mean.dtAct = x.dtAct, x.dtAct // each read twice
	s.record("Mean", []*tensor{h}, mean)
	d1 := s.sub(h, mean)
	p := s.alloc(x.elems, f32, catTemp, "pow")
	if n := s.record("Pow", []*tensor{d1}, p); n != nil {
		s.save(n, d1)
		n.pairTemps = d1.bytes()
	}
	s.unref(d1)
	v := s.alloc(rows, f32, catTemp, "mean")
	s.record("Mean", []*tensor{p}, v)
	s.unref(p)
	d2 := s.sub(h, mean)
	ve := s.addScalar(v)
	r := s.unary("Rsqrt", ve, false, true)
	s.unref(ve)
	nrm := s.mul(d2, r)
	s.unref(d2)
	s.unref(r)
	s.unref(h)
	w32 := s.to(w, f32)
	y32 := s.mul(w32, nrm)
	s.unref(w32)
	s.unref(nrm)
	y := s.to(y32, x.dt)
	s.unref(y32)
	s.unref(v)
	s.unref(mean)
	return y
}

// rmsNormOf is the RMSNorm a model uses, for its layers and its query and
// key norms alike: GemmaRMSNorm (offset), Olmo2RMSNorm (fp32Product) or
// LlamaRMSNorm.
func (s *sim) rmsNormOf(x, w *tensor, rows int64, offset, fp32Product bool) *tensor {
	switch {
	case offset:
		return s.gemmaRMSNorm(x, w, rows)
	case fp32Product:
		return s.olmo2RMSNorm(x, w, rows)
	}
	return s.rmsNorm(x, w, rows)
}

// rmsNorm is transformers' LlamaRMSNorm: h = x.float();
// h·rsqrt(mean(h²)+ε) in fp32, cast back to the input dtype, times weight.
func (s *sim) rmsNorm(x, w *tensor, rows int64) *tensor { return s.rmsNormWeighted(x, w, rows, false) }

// rmsNormWeighted is the normalised rows times the weight, the weight the
// product's first operand (LlamaRMSNorm's weight * output) or, with
// weightLast, its second (Llama4TextRMSNorm's output * weight,
// model.RMSNorm.WeightLast), which MulBackward0's order of gradients
// follows. Llama4TextRMSNorm casts the
// unbound result of _norm(x.float()) (output = ....type_as(x)), so in
// half precision the fp32 rows go before the product; LlamaRMSNorm binds
// them to hidden_states until it returns (measured: Llama 4's test shape
// in bf16, held-out set 59's history, bench/results/2026-11-28-h200-
// heldout59-traces).
func (s *sim) rmsNormWeighted(x, w *tensor, rows int64, weightLast bool) *tensor {
	nrm := s.rmsNormalize(x, rows)
	nc := s.to(nrm, x.dt)
	var y *tensor
	if weightLast {
		s.unref(nrm)
		y = s.mul(nc, w)
	} else {
		y = s.mul(w, nc)
		s.unref(nrm)
	}
	s.unref(nc)
	return y
}

// rmsNormalize is h·rsqrt(mean(h²)+ε) for h = x.float(), in fp32 (the
// normalisation both RMSNorms share; the cast copy goes once the product
// is made).
func (s *sim) rmsNormalize(x *tensor, rows int64) *tensor {
	h := s.to(x, f32)
	h.dtAct = x.dtAct // read by the power and the product
	p := s.alloc(x.elems, f32, catTemp, "pow")
	if n := s.record("Pow", []*tensor{h}, p); n != nil {
		s.save(n, h)
		n.pairTemps = h.bytes()
	}
	v := s.alloc(rows, f32, catTemp, "mean")
	s.record("Mean", []*tensor{p}, v)
	s.unref(p)
	ve := s.addScalar(v)
	s.unref(v)
	r := s.unary("Rsqrt", ve, false, true)
	s.unref(ve)
	nrm := s.mul(h, r)
	s.unref(h)
	s.unref(r)
	return nrm
}

// gemmaRMSNorm is transformers' GemmaRMSNorm (Gemma, Gemma 2): the
// normalised fp32 rows times 1 + weight.float() in fp32, then type_as(x):
// the product is fp32 (and saved in fp32 when the weight trains), and the
// cast back comes last (measured: Gemma-2-2B in bf16 under FSDP2,
// modeling_gemma2.py:56-63 in rank 0's allocator history,
// bench/results/2026-11-26-h100x2-lora-heldout-snapshots). The product's
// backward sums the gradient of 1 + weight over the rows with the column
// sum's scratch, as for a weight (measured: 72 and 81 MiB after every norm
// of Gemma-2-2B at 4,096 and 4,608 tokens in bf16,
// bench/results/2026-11-27-gemma-eager-traces).
func (s *sim) gemmaRMSNorm(x, w *tensor, rows int64) *tensor {
	nrm := s.rmsNormalize(x, rows)
	w32 := s.to(w, f32)
	w1 := s.addScalar(w32)
	s.unref(w32)
	y32 := s.mul(nrm, w1)
	s.unref(nrm)
	s.unref(w1)
	y := s.to(y32, x.dt)
	s.unref(y32)
	return y
}

// olmo2RMSNorm is transformers' Olmo2RMSNorm: the normalised fp32 rows
// times the weight, (weight · h).to(input_dtype), so the product is fp32
// (type promotion over a half weight) and the weight's gradient saves the
// fp32 rows, not a half copy as Llama's does; the cast back comes next,
// and the normalised rows, bound to hidden_states, go when the function
// returns (modeling_olmo2.py; its allocator history,
// bench/results/2026-11-27-h100-olmo2-traces).
func (s *sim) olmo2RMSNorm(x, w *tensor, rows int64) *tensor {
	nrm := s.rmsNormalize(x, rows)
	y32 := s.mul(w, nrm)
	y := s.to(y32, x.dt)
	s.unref(y32)
	s.unref(nrm)
	return y
}

func init() {
	register(model.KGroupNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.GroupNorm)
		o := &groupNormOp{k: k}
		if k.Affine {
			o.w, o.b = s.param(k.Channels, "gn.weight"), s.param(k.Channels, "gn.bias")
		}
		return o
	})
}

type groupNormOp struct {
	k    *model.GroupNorm
	w, b *tensor
}

// forward is F.group_norm, in autocast's fp32 list: a half input is copied
// to fp32 and the output is fp32. native_group_norm saves the (cast) input,
// the weight and the per-(sample, group) mean and rstd
// (tools/autograd/derivatives.yaml); its CUDA backward takes two
// per-(sample, channel) fp32 sums (ds, db). With a weight and bias and more
// than one position per channel, the CUDA forward
// (GroupNormKernelImplInternal) folds them into a per-(sample, channel)
// fp32 scale and shift, two tensors it frees before returning (in the
// allocator histories of bench/results/2026-11-27-h200-cnn-large/ and
// 2026-11-27-h200-cnn-fp32/, 1.46 MiB each for 256 channels at batch 1,500).
func (o *groupNormOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	xc := s.castF32(x)
	y := s.alloc(x.elems, xc.dt, catTemp, "groupnorm")
	stats := s.cfg.batch * o.k.Groups
	mean := s.alloc(stats, xc.dt, catTemp, "mean")
	rstd := s.alloc(stats, xc.dt, catTemp, "rstd")
	if perChannel := s.cfg.batch * o.k.Channels; o.w != nil && x.elems > perChannel {
		a := s.alloc(perChannel, f32, catTemp, "groupnorm scale")
		b := s.alloc(perChannel, f32, catTemp, "groupnorm shift")
		s.unref(a)
		s.unref(b)
	}
	if n := s.record("NativeGroupNorm", []*tensor{xc, o.w, o.b}, y); n != nil {
		s.save(n, xc, o.w, mean, rstd)
		n.bwdTemp = 2 * s.cfg.batch * o.k.Channels * f32
	}
	s.unref(xc)
	s.unref(mean)
	s.unref(rstd)
	return y
}

// batchNorm in training mode is not an autocast op: a half input gives a
// half output. It saves the input and fp32 per-channel statistics.
//
// Past 2³¹ − 1 elements neither cuDNN nor the native 32-bit kernels take
// the input: batch_norm_cuda's General path computes the statistics with
// var_mean_out, whose two-result reduction (make_reduction in
// ATen/native/ReduceOpsUtils.h) reads a bf16 input through an fp32 copy
// (its shortcut for a half input with float results covers fp16 only). The copy, the input's elements in fp32, lives until
// the statistics are done (in the allocator histories of
// bench/results/2026-11-27-h200-resnet-2p31/, 8,575 MiB for a ResNet-50's
// 56×56 activations at batch 2,800, nine times a step).
func (s *sim) batchNorm(x, w, b *tensor, ch int64) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "batchnorm")
	m := s.alloc(ch, f32, catTemp, "save_mean")
	v := s.alloc(ch, f32, catTemp, "save_invstd")
	if x.elems > 1<<31-1 && x.dt == half && !s.cfg.fp16 {
		s.unref(s.alloc(x.elems, f32, catTemp, "batchnorm statistics' fp32 copy"))
	}
	if n := s.record("BatchNorm", []*tensor{x, w, b}, y); n != nil {
		s.save(n, x, m, v)
	}
	s.unref(m)
	s.unref(v)
	return y
}

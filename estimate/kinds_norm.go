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
		return &layerNormOp{s.param(k.Dim, "ln.weight"), s.optParam(k.Bias, k.Dim, "ln.bias")}
	})
	register(model.KRMSNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.RMSNorm)
		return &rmsNormOp{s.param(k.Dim, "rmsnorm.weight"), k.Offset}

	})
}

type batchNormOp struct {
	k    *model.BatchNorm
	w, b *tensor
}

func (o *batchNormOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	return s.batchNorm(x, o.w, o.b, o.k.Channels)
}

type layerNormOp struct{ w, b *tensor }

func (o *layerNormOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	return s.layerNorm(x, o.w, o.b, s.rows(sh))
}

type rmsNormOp struct {
	w      *tensor
	offset bool // GemmaRMSNorm (model.RMSNorm.Offset)
}

func (o *rmsNormOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	if o.offset {
		return s.gemmaRMSNorm(x, o.w, s.rows(sh))
	}
	return s.rmsNorm(x, o.w, s.rows(sh))
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
// per-(sample, channel) fp32 sums (ds, db).
func (o *groupNormOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	xc := s.castF32(x)
	y := s.alloc(x.elems, xc.dt, catTemp, "groupnorm")
	stats := s.cfg.batch * o.k.Groups
	mean := s.alloc(stats, xc.dt, catTemp, "mean")
	rstd := s.alloc(stats, xc.dt, catTemp, "rstd")
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
func (s *sim) batchNorm(x, w, b *tensor, ch int64) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "batchnorm")
	m := s.alloc(ch, f32, catTemp, "save_mean")
	v := s.alloc(ch, f32, catTemp, "save_invstd")
	if n := s.record("BatchNorm", []*tensor{x, w, b}, y); n != nil {
		s.save(n, x, m, v)
	}
	s.unref(m)
	s.unref(v)
	return y
}

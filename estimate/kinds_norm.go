package estimate

import "github.com/memplan/memplan/model"

// Normalisation layers.

func init() {
	register(model.KBatchNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.BatchNorm)
		o := &batchNormOp{k: k, w: s.param(k.Channels, "bn.weight"), b: s.param(k.Channels, "bn.bias")}
		s.buffer(k.Channels, "bn.running_mean")
		s.buffer(k.Channels, "bn.running_var")
		s.buffer(2, "bn.num_batches_tracked")
		return o
	})
	register(model.KLayerNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.LayerNorm)
		return &layerNormOp{s.param(k.Dim, "ln.weight"), s.optParam(k.Bias, k.Dim, "ln.bias")}
	})
	register(model.KRMSNorm, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		return &rmsNormOp{s.param(l.Spec.(*model.RMSNorm).Dim, "rmsnorm.weight")}
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

type rmsNormOp struct{ w *tensor }

func (o *rmsNormOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	return s.rmsNorm(x, o.w, s.rows(sh))
}

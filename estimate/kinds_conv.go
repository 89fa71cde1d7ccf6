package estimate

import "github.com/memplan/memplan/model"

// Convolutions and pooling.

func init() {
	register(model.KConv2d, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.Conv2d)
		return &conv2dOp{k, s.matrix(k.Kernel, k.Kernel, k.Out*k.In, "conv.weight"), s.optParam(k.Bias, k.Out, "conv.bias")}
	})
	register(model.KMaxPool, func(*sim, *model.Layer, map[string]*tensor) op { return maxPoolOp{} })
	register(model.KAvgPool, func(*sim, *model.Layer, map[string]*tensor) op { return avgPoolOp{} })
	register(model.KPatchEmbed, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.PatchEmbed)
		return &patchEmbedOp{k, s.matrix(k.Kernel, k.Kernel, k.Dim*k.Channels, "patch.weight"), s.param(k.Dim, "patch.bias")}
	})
}

type conv2dOp struct {
	k    *model.Conv2d
	w, b *tensor
}

func (o *conv2dOp) forward(s *sim, x *tensor, sh, out model.Shape) *tensor {
	k := o.k
	g := convGeom{in: k.In, out: k.Out, kernel: k.Kernel, stride: k.Stride, padding: k.Padding, h: sh[1], w: sh[2]}
	return s.conv2d(x, o.w, o.b, s.cfg.batch*out.Elems(), g)
}

type maxPoolOp struct{}

func (maxPoolOp) forward(s *sim, x *tensor, _, out model.Shape) *tensor {
	return s.maxPool(x, s.cfg.batch*out.Elems())
}

type avgPoolOp struct{}

func (avgPoolOp) forward(s *sim, x *tensor, _, out model.Shape) *tensor {
	y := s.alloc(s.cfg.batch*out.Elems(), x.dt, catTemp, "avgpool")
	s.record("Mean", []*tensor{x}, y)
	return y
}

type patchEmbedOp struct {
	k    *model.PatchEmbed
	w, b *tensor
}

func (o *patchEmbedOp) forward(s *sim, x *tensor, sh, out model.Shape) *tensor {
	k := o.k
	g := convGeom{in: k.Channels, out: k.Dim, kernel: k.Kernel, stride: k.Kernel, h: sh[1], w: sh[2]}
	return s.conv2d(x, o.w, o.b, s.cfg.batch*out.Elems(), g)
}

func init() {
	register(model.KConv1d, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.Conv1d)
		return &conv1dOp{k, s.matrix(k.In, k.Kernel, k.Out, "conv1d.weight"), s.optParam(k.Bias, k.Out, "conv1d.bias")}
	})
	register(model.KTranspose, func(*sim, *model.Layer, map[string]*tensor) op { return transposeOp{} })
}

type conv1dOp struct {
	k    *model.Conv1d
	w, b *tensor
}

// forward is F.conv1d. cuDNN runs it as a 2-D convolution of unit height
// (the input unsqueezed to [N, C, 1, L]), saving the same tensors as
// conv2d. The workspace table holds square 2-D geometries only, so its
// workspaces come from the table's class medians, which the result notes.
func (o *conv1dOp) forward(s *sim, x *tensor, sh, out model.Shape) *tensor {
	k := o.k
	g := convGeom{in: k.In, out: k.Out, kernel: k.Kernel, stride: k.Stride, padding: k.Padding, h: 1, w: sh[1]}
	if t := s.cudnn(); t != nil {
		hg := g
		hg.half = s.cfg.compute != f32
		if _, measured := t.points[hg]; !measured {
			s.note("conv1d: cuDNN's workspace for this geometry is unmeasured; it is estimated from the measured 2-D convolutions' median ratios")
		}
	}
	return s.conv2d(x, o.w, o.b, s.cfg.batch*out.Elems(), g)
}

// transposeOp is x.transpose(1, 2): a view whose memory is not row-major,
// so the kernels that need contiguous input copy it.
type transposeOp struct{}

func (transposeOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	v := s.view(x, x.elems)
	v.perm = true
	if n := s.record("Transpose", []*tensor{x}, v); n != nil {
		n.pass = true
	}
	return v
}

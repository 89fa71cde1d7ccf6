package estimate

import (
	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/model"
)

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
	// torchvision reshapes the output and permutes it to [batch, patches,
	// dim]: its gradient comes back through the permute, strided.
	y := s.conv2d(x, o.w, o.b, s.cfg.batch*out.Elems(), g)
	y.gradPerm = true
	return y
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
// conv2d. Its workspaces come from the measured 1-D table (cudnn.go); a
// geometry it does not hold takes the 1-D class medians, which the result
// notes.
func (o *conv1dOp) forward(s *sim, x *tensor, sh, out model.Shape) *tensor {
	k := o.k
	g := convGeom{in: k.In, out: k.Out, kernel: k.Kernel, stride: k.Stride, padding: k.Padding, h: 1, w: sh[1], oneD: true}
	if t := s.cudnn(); t != nil {
		hg := g
		hg.half = s.cfg.compute != f32
		hg.fp16 = hg.half && s.cfg.fp16
		if !t.measured(hg) {
			s.note(conv1dUnmeasured)
		}
	}
	return s.conv2d(x, o.w, o.b, s.cfg.batch*out.Elems(), g)
}

// conv1dUnmeasured is the note of a 1-D convolution whose geometry the
// workspace table does not hold.
const conv1dUnmeasured = "conv1d: cuDNN's workspace for this geometry is unmeasured; it is estimated from the measured 1-D convolutions' median ratios"

// transposeOp is x.transpose(1, 2): a view whose memory is not row-major,
// so the kernels that need contiguous input copy it.
type transposeOp struct{}

func (transposeOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	// The gradient comes back through the transpose, strided, and stays
	// so through elementwise activations to the tensor before them
	// (measured: Whisper's second convolution, whose backward copies its
	// incoming gradient after GELU's, bench/results/2026-11-23-h100-traces/whisper).
	for t := x; t != nil; t = t.from {
		t.gradPerm = true
	}
	v := s.view(x, x.elems)
	v.perm = true
	if n := s.record("Transpose", []*tensor{x}, v); n != nil {
		n.pass = true
	}
	return v
}

// conv2d saves its (cast) input and weight. cuDNN takes a transient
// workspace for the forward, and in backward one after allocating the
// input's gradient and one after the weight's (cudnn.go).
func (s *sim) conv2d(x, w, b *tensor, outElems int64, g convGeom) *tensor {
	// cuDNN's first kernels free room in the context's address space
	// that later segments fill.
	s.libraryLoaded(alloc.CuDNN)
	// autocast casts the bias, the weight, then the input (right to left:
	// matmulView).
	var bc *tensor
	if b != nil {
		bc = s.castLow(b)
	}
	wc, xc := s.castLow(w), s.castLow(x)
	y := s.alloc(outElems, promote(xc.dt, wc.dt), catTemp, "conv out")
	g.half = y.dt != f32
	g.fp16 = g.half && s.cfg.fp16
	ws := s.convWorkspace(g, xc.bytes(), y.bytes())
	if ws.fwd > 0 {
		s.unref(s.alloc(ws.fwd, u8, catWorkspace, "cudnn forward workspace"))
	}
	if n := s.record("Convolution", []*tensor{xc, wc, bc}, y); n != nil {
		s.save(n, xc, wc)
		n.gradWS = s.workspaces([3]inputWS{{t: xc, bytes: ws.data}, {t: wc, bytes: ws.weight}, {t: bc, sum: true}})
		n.dyFirst = true
	}
	s.unref(xc)
	s.unref(wc)
	s.unref(bc)
	return y
}

// convWorkspace looks the geometry up in the measured table.
func (s *sim) convWorkspace(g convGeom, inBytes, outBytes int64) convWS {
	t := s.cudnn()
	if t == nil {
		return convWS{}
	}
	return t.lookup(g, s.cfg.batch, inBytes, outBytes)
}

// cudnn returns the workspace table of the run's device (cudnn.go), which
// is parsed on the first lookup, so models without convolutions never read
// it.
func (s *sim) cudnn() *wsTable { return s.cfg.cudnn }

// maxPool saves the input and int64 indices of the output's size.
func (s *sim) maxPool(x *tensor, outElems int64) *tensor {
	y := s.alloc(outElems, x.dt, catTemp, "maxpool")
	idx := s.alloc(outElems, i64, catTemp, "maxpool indices")
	if n := s.record("MaxPool2D", []*tensor{x}, y); n != nil {
		s.save(n, x, idx)
	}
	s.unref(idx)
	return y
}

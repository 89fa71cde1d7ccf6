package estimate

import "github.com/memplan/memplan/model"

// Linear layers, activations, dropout and flatten.

func init() {
	register(model.KLinear, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.Linear)
		return &linearOp{k, s.matrix(k.Out, k.In, 1, "linear.weight"), s.optParam(k.Bias, k.Out, "linear.bias")}
	})
	for _, name := range []string{model.KReLU, model.KGELU, model.KGELUNew, model.KSiLU, model.KTanh} {
		register(name, func(_ *sim, l *model.Layer, _ map[string]*tensor) op {
			return activationOp{l.Spec.(*model.Activation)}
		})
	}
	register(model.KDropout, func(_ *sim, l *model.Layer, _ map[string]*tensor) op {
		return dropoutOp{l.Spec.(*model.Dropout).P}
	})
	register(model.KFlatten, func(*sim, *model.Layer, map[string]*tensor) op { return viewOp{} })
}

type linearOp struct {
	k    *model.Linear
	w, b *tensor
}

func (o *linearOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	if o.k.Head {
		// The base model's forward has returned: its locals go, and on a
		// pipeline's last stage (pp.HFStage, which keeps only the hidden
		// states) the key/value cache with its output.
		s.dropBodyHold()
		s.dropKVHold()
		s.lossHold = append(s.lossHold, s.ref(x))
	}
	if o.k.Conv1D {
		return s.matmulConv1D(x, o.w, o.b, s.rows(sh), o.k.Out)
	}
	return s.matmul(x, o.w, o.b, s.rows(sh), o.k.Out)
}

type activationOp struct{ k *model.Activation }

func (o activationOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	return s.activation(o.k.Name, x, o.k.Inplace)
}

type dropoutOp struct{ p float64 }

func (o dropoutOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	if o.p == 0 {
		return s.ref(x)
	}
	return s.dropout(x)
}

// viewOp is a reshape that keeps x's storage (flatten).
type viewOp struct{}

func (viewOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor { return s.ref(x) }

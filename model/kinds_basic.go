package model

// Elementwise and reshaping kinds: linear, activations, dropout, flatten.

// Layer kinds of this file.
const (
	KLinear  = "linear"
	KReLU    = "relu"
	KGELU    = "gelu"
	KGELUNew = "gelu_new"
	KSiLU    = "silu"
	KTanh    = "tanh"
	KDropout = "dropout"
	KFlatten = "flatten"
)

func init() {
	register(KLinear, "y = x·Wᵀ + b over the last dimension (bias defaults to true)", func() KindSpec { return &Linear{Bias: true} })
	register(KReLU, "ReLU (inplace: true modifies its input, as torchvision does)", func() KindSpec { return &Activation{Name: KReLU} })
	register(KGELU, "GELU (erf), one kernel", func() KindSpec { return &Activation{Name: KGELU} })
	register(KGELUNew, "tanh-approximated GELU written out in Python, as transformers' gelu_new", func() KindSpec { return &Activation{Name: KGELUNew} })
	register(KSiLU, "SiLU", func() KindSpec { return &Activation{Name: KSiLU} })
	register(KTanh, "tanh", func() KindSpec { return &Activation{Name: KTanh} })
	register(KDropout, "dropout (saves a 1-byte mask)", func() KindSpec { return &Dropout{} })
	register(KFlatten, "flatten to one dimension per sample", func() KindSpec { return &Flatten{} })
}

// Linear is nn.Linear over the last dimension.
type Linear struct {
	In, Out int64
	Bias    bool
	// Name labels the layer (ties name embeddings; accepted here too).
	Name string
	// Conv1D is transformers' Conv1D (GPT-2), addmm(bias, x, weight):
	// autocast casts its arguments right to left, the weight first and
	// the bias last, where nn.Linear's F.linear(x, weight, bias) casts the
	// bias first. Set by the GPT-2 lowering.
	Conv1D bool
	// Head marks the first layer of a task model's head, run after the
	// base model's forward has returned: the base model's locals are
	// dropped (Positions.Hold, Repeat.HoldInput), and its output, this
	// layer's input, stays bound in the task model's forward until the
	// loss is computed, as transformers' *ForMaskedLM.forward keeps the
	// encoder's output in `outputs` while its head runs. Set by the BERT
	// lowering on the head's transform.
	Head bool
}

// Kind is the name specs use for the kind.
func (*Linear) Kind() string { return KLinear }

func (k *Linear) decode(a *args, _ *Layer) {
	a.int("in", &k.In, true)
	a.int("out", &k.Out, true)
	a.bool("bias", &k.Bias)
	a.str("name", &k.Name)
	a.bool("head", &k.Head)
}

func (k *Linear) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needWidth(l, s, k.In, "in"); err != nil {
		return nil, err
	}
	out := append(Shape(nil), s...)
	out[len(out)-1] = k.Out
	return out, nil
}

func (k *Linear) params(*Layer) float64 { return f64(k.In)*f64(k.Out) + b64(k.Bias)*f64(k.Out) }

// Activation is an elementwise activation function; Name is its kind
// (relu, gelu, gelu_new, silu, tanh).
type Activation struct {
	Name string
	// Inplace marks a ReLU done in place (torchvision).
	Inplace bool
}

// Act is the layer of a named activation kind.
func Act(name string) Layer { return L(&Activation{Name: name}) }

// Kind is the name specs use for the kind.
func (k *Activation) Kind() string { return k.Name }

func (k *Activation) decode(a *args, _ *Layer) {
	if k.Name == KReLU {
		a.bool("inplace", &k.Inplace)
	}
}

func (k *Activation) infer(_ *Layer, s Shape, _ map[string]*Layer) (Shape, error) { return s, nil }
func (k *Activation) params(*Layer) float64                                       { return 0 }

// Dropout is nn.Dropout with probability P.
type Dropout struct{ P float64 }

// Kind is the name specs use for the kind.
func (*Dropout) Kind() string { return KDropout }

func (k *Dropout) decode(a *args, _ *Layer) { a.float("p", &k.P, 0, 1, true) }

func (k *Dropout) infer(_ *Layer, s Shape, _ map[string]*Layer) (Shape, error) { return s, nil }
func (k *Dropout) params(*Layer) float64                                       { return 0 }

// Flatten flattens each sample to one dimension.
type Flatten struct{}

// Kind is the name specs use for the kind.
func (*Flatten) Kind() string         { return KFlatten }
func (*Flatten) decode(*args, *Layer) {}
func (*Flatten) infer(_ *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	return Shape{s.Elems()}, nil
}
func (*Flatten) params(*Layer) float64 { return 0 }

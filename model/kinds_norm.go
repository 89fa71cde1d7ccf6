package model

// Normalisation kinds.

// Layer kinds of this file.
const (
	KBatchNorm = "batchnorm2d"
	KLayerNorm = "layernorm"
	KRMSNorm   = "rmsnorm"
)

func init() {
	register(KBatchNorm, "BatchNorm2d in training mode", func() KindSpec { return &BatchNorm{} })
	register(KLayerNorm, "LayerNorm over the last dimension", func() KindSpec { return &LayerNorm{Bias: true} })
	register(KRMSNorm, "RMSNorm as transformers writes it (fp32 compute)", func() KindSpec { return &RMSNorm{} })
}

// BatchNorm is nn.BatchNorm2d in training mode over [channels, h, w].
type BatchNorm struct{ Channels int64 }

// Kind is the name specs use for the kind.
func (*BatchNorm) Kind() string { return KBatchNorm }

func (k *BatchNorm) decode(a *args, _ *Layer) { a.int("channels", &k.Channels, true) }

func (k *BatchNorm) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if len(s) != 3 || s[0] != k.Channels {
		return nil, bad(l, "channels (%d) does not match the input %v", k.Channels, s)
	}
	return s, nil
}

func (k *BatchNorm) params(*Layer) float64 { return 2 * f64(k.Channels) }

// LayerNorm is nn.LayerNorm over the last dimension.
type LayerNorm struct {
	Dim  int64
	Bias bool
	// Plain is OLMo's OlmoLayerNorm: no weight or bias, the input cast to
	// fp32 first and the output back to the input's dtype.
	Plain bool
}

// Kind is the name specs use for the kind.
func (*LayerNorm) Kind() string { return KLayerNorm }

func (k *LayerNorm) decode(a *args, _ *Layer) {
	a.int("dim", &k.Dim, true)
	a.bool("bias", &k.Bias)
	a.bool("plain", &k.Plain)
}

func (k *LayerNorm) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *LayerNorm) params(*Layer) float64 {
	if k.Plain {
		return 0
	}
	return f64(k.Dim) * (1 + b64(k.Bias))
}

// RMSNorm is transformers' RMSNorm over the last dimension: LlamaRMSNorm
// (normalised in fp32, cast back, times the weight), or with Offset
// GemmaRMSNorm (normalised in fp32, times 1 + w in fp32, then cast back).
type RMSNorm struct {
	Dim    int64
	Offset bool
	// FP32Product multiplies the weight into the fp32 normalised rows
	// and casts the product back (OLMo 2's Olmo2RMSNorm).
	FP32Product bool
	// Centered subtracts the rows' mean first, making it a LayerNorm
	// without bias written out in Python, its product in fp32
	// (Cohere's CohereLayerNorm).
	Centered bool
	// WeightLast multiplies the weight in as the product's second operand,
	// output * weight (Llama 4's Llama4TextRMSNorm), where LlamaRMSNorm
	// writes weight * output: the same memory forward, but autograd's
	// MulBackward0 makes its second operand's gradient first, so the
	// weight's unreduced gradient comes before the rows'.
	WeightLast bool
}

// Kind is the name specs use for the kind.
func (*RMSNorm) Kind() string { return KRMSNorm }

func (k *RMSNorm) decode(a *args, _ *Layer) {
	a.int("dim", &k.Dim, true)
	a.bool("offset", &k.Offset)
	a.bool("fp32_product", &k.FP32Product)
	a.bool("centered", &k.Centered)
	a.bool("weight_last", &k.WeightLast)
}

func (k *RMSNorm) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *RMSNorm) params(*Layer) float64 { return f64(k.Dim) }

// KGroupNorm is nn.GroupNorm's kind.
const KGroupNorm = "groupnorm"

func init() {
	register(KGroupNorm, "GroupNorm over [channels, ...] in groups (affine defaults to true)", func() KindSpec { return &GroupNorm{Affine: true} })
}

// GroupNorm is nn.GroupNorm(Groups, Channels, affine=Affine) over an input
// of [channels, length] or [channels, height, width].
type GroupNorm struct {
	Groups, Channels int64
	Affine           bool
}

// Kind is the name specs use for the kind.
func (*GroupNorm) Kind() string { return KGroupNorm }

func (k *GroupNorm) decode(a *args, _ *Layer) {
	a.int("groups", &k.Groups, true)
	a.int("channels", &k.Channels, true)
	a.bool("affine", &k.Affine)
}

func (k *GroupNorm) validate(e *errs, line int) {
	if k.Groups > 0 && k.Channels%k.Groups != 0 {
		e.add(line, "groupnorm: groups (%d) must divide channels (%d)", k.Groups, k.Channels)
	}
}

func (k *GroupNorm) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if len(s) < 2 || s[0] != k.Channels {
		return nil, bad(l, "channels (%d) does not match the input %v (want [channels, ...])", k.Channels, s)
	}
	return s, nil
}

func (k *GroupNorm) params(*Layer) float64 { return 2 * b64(k.Affine) * f64(k.Channels) }

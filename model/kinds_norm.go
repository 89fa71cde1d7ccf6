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
}

func (*LayerNorm) Kind() string { return KLayerNorm }

func (k *LayerNorm) decode(a *args, _ *Layer) {
	a.int("dim", &k.Dim, true)
	a.bool("bias", &k.Bias)
}

func (k *LayerNorm) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *LayerNorm) params(*Layer) float64 { return f64(k.Dim) * (1 + b64(k.Bias)) }

// RMSNorm is transformers' RMSNorm over the last dimension.
type RMSNorm struct{ Dim int64 }

func (*RMSNorm) Kind() string { return KRMSNorm }

func (k *RMSNorm) decode(a *args, _ *Layer) { a.int("dim", &k.Dim, true) }

func (k *RMSNorm) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *RMSNorm) params(*Layer) float64 { return f64(k.Dim) }

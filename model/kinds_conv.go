package model

// Convolution and pooling kinds over [channels, height, width].

// Layer kinds of this file.
const (
	KConv2d     = "conv2d"
	KMaxPool    = "maxpool2d"
	KAvgPool    = "avgpool"
	KPatchEmbed = "patch_embed"
)

func init() {
	register(KConv2d, "2-D convolution, NCHW", func() KindSpec { return &Conv2d{ConvArgs{Bias: true}} })
	register(KMaxPool, "2-D max pooling", func() KindSpec { return &MaxPool{} })
	register(KAvgPool, "global average pooling to 1×1", func() KindSpec { return &AvgPool{} })
	register(KPatchEmbed, "ViT patch embedding: a conv with stride = kernel, then tokens", func() KindSpec { return &PatchEmbed{} })
}

func convOut(in, k, stride, pad int64) int64 { return (in+2*pad-k)/stride + 1 }

func needImage(l *Layer, s Shape) error {
	if len(s) != 3 {
		return bad(l, "needs a [channels, height, width] input, got %v", s)
	}
	return nil
}

// window is the output of a square kernel sliding over an image.
func window(l *Layer, s Shape, ch, kernel, stride, pad int64) (Shape, error) {
	h, w := convOut(s[1], kernel, stride, pad), convOut(s[2], kernel, stride, pad)
	if h <= 0 || w <= 0 {
		return nil, bad(l, "kernel %d is larger than the %d×%d input", kernel, s[1], s[2])
	}
	return Shape{ch, h, w}, nil
}

// ConvArgs are the arguments every convolution kind shares, as nn.Conv1d
// and nn.Conv2d take them (a square kernel for 2-D).
type ConvArgs struct {
	In, Out, Kernel, Stride, Padding int64
	Bias                             bool
}

// decode reads the arguments; stride defaults to 1.
func (k *ConvArgs) decode(a *args, _ *Layer) {
	a.int("in", &k.In, true)
	a.int("out", &k.Out, true)
	a.int("kernel", &k.Kernel, true)
	a.int("stride", &k.Stride, false)
	a.count("padding", &k.Padding)
	a.bool("bias", &k.Bias)
	if k.Stride == 0 && a.m != nil {
		k.Stride = 1
	}
}

// Conv2d is nn.Conv2d with a square kernel (NCHW).
type Conv2d struct{ ConvArgs }

// Kind is the name specs use for the kind.
func (*Conv2d) Kind() string { return KConv2d }

func (k *Conv2d) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needImage(l, s); err != nil {
		return nil, err
	}
	if k.In != s[0] {
		return nil, bad(l, "in (%d) does not match the input channels (%d)", k.In, s[0])
	}
	return window(l, s, k.Out, k.Kernel, k.Stride, k.Padding)
}

func (k *Conv2d) params(*Layer) float64 {
	return f64(k.Out)*f64(k.In)*f64(k.Kernel)*f64(k.Kernel) + b64(k.Bias)*f64(k.Out)
}

// MaxPool is nn.MaxPool2d with a square window (stride defaults to it).
type MaxPool struct{ Kernel, Stride, Padding int64 }

// Kind is the name specs use for the kind.
func (*MaxPool) Kind() string { return KMaxPool }

func (k *MaxPool) decode(a *args, _ *Layer) {
	a.int("kernel", &k.Kernel, true)
	a.int("stride", &k.Stride, false)
	a.count("padding", &k.Padding)
	if k.Stride == 0 && a.m != nil {
		k.Stride = k.Kernel
	}
}

func (k *MaxPool) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needImage(l, s); err != nil {
		return nil, err
	}
	return window(l, s, s[0], k.Kernel, k.Stride, k.Padding)
}

func (k *MaxPool) params(*Layer) float64 { return 0 }

// AvgPool is global average pooling to 1×1.
type AvgPool struct{}

// Kind is the name specs use for the kind.
func (*AvgPool) Kind() string         { return KAvgPool }
func (*AvgPool) decode(*args, *Layer) {}
func (*AvgPool) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needImage(l, s); err != nil {
		return nil, err
	}
	return Shape{s[0], 1, 1}, nil
}
func (*AvgPool) params(*Layer) float64 { return 0 }

// PatchEmbed is ViT's patch embedding: a convolution with stride = kernel
// whose output becomes tokens.
type PatchEmbed struct{ Channels, Dim, Kernel int64 }

// Kind is the name specs use for the kind.
func (*PatchEmbed) Kind() string { return KPatchEmbed }

func (k *PatchEmbed) decode(a *args, _ *Layer) {
	a.int("channels", &k.Channels, true)
	a.int("dim", &k.Dim, true)
	a.int("kernel", &k.Kernel, true)
}

func (k *PatchEmbed) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needImage(l, s); err != nil {
		return nil, err
	}
	if k.Channels != s[0] {
		return nil, bad(l, "channels (%d) does not match the input channels (%d)", k.Channels, s[0])
	}
	if s[1]%k.Kernel != 0 || s[2]%k.Kernel != 0 {
		return nil, bad(l, "kernel (%d) must divide the image size (%d×%d)", k.Kernel, s[1], s[2])
	}
	return Shape{(s[1] / k.Kernel) * (s[2] / k.Kernel), k.Dim}, nil
}

func (k *PatchEmbed) params(*Layer) float64 {
	return f64(k.Dim)*f64(k.Channels)*f64(k.Kernel)*f64(k.Kernel) + f64(k.Dim)
}

// Kinds over [channels, length] (audio features, NCL).
const (
	KConv1d    = "conv1d"
	KTranspose = "transpose"
)

func init() {
	register(KConv1d, "1-D convolution over [channels, length], NCL", func() KindSpec { return &Conv1d{ConvArgs{Bias: true}} })
	register(KTranspose, "[channels, length] to [length, channels] tokens: a view, as x.transpose(1, 2)", func() KindSpec { return &Transpose{} })
}

// Conv1d is nn.Conv1d over [channels, length].
type Conv1d struct{ ConvArgs }

// Kind is the name specs use for the kind.
func (*Conv1d) Kind() string { return KConv1d }

func (k *Conv1d) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if len(s) != 2 {
		return nil, bad(l, "needs a [channels, length] input, got %v", s)
	}
	if k.In != s[0] {
		return nil, bad(l, "in (%d) does not match the input channels (%d)", k.In, s[0])
	}
	n := convOut(s[1], k.Kernel, k.Stride, k.Padding)
	if n <= 0 {
		return nil, bad(l, "kernel %d is longer than the input (%d)", k.Kernel, s[1])
	}
	return Shape{k.Out, n}, nil
}

func (k *Conv1d) params(*Layer) float64 {
	return f64(k.Out)*f64(k.In)*f64(k.Kernel) + b64(k.Bias)*f64(k.Out)
}

// Transpose swaps the two dimensions of a [channels, length] sample, giving
// [length, channels] tokens; the result is a view.
type Transpose struct{}

// Kind is the name specs use for the kind.
func (*Transpose) Kind() string         { return KTranspose }
func (*Transpose) decode(*args, *Layer) {}
func (*Transpose) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if len(s) != 2 {
		return nil, bad(l, "needs a [channels, length] input, got %v", s)
	}
	return Shape{s[1], s[0]}, nil
}
func (*Transpose) params(*Layer) float64 { return 0 }

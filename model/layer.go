package model

import (
	"fmt"
	"math"
	"slices"
)

// Layer is one node of the explicit layer tree. Shorthand models are lowered
// to the same tree (see Lower), so every kind below can be written by hand.
// Which fields a kind reads is listed in layerKinds and in docs/spec.md.
type Layer struct {
	Kind string `json:"kind"`
	// Line is the spec line the layer came from; 0 for lowered shorthands.
	Line int `json:"-"`

	In       int64 `json:"in,omitempty"`
	Out      int64 `json:"out,omitempty"`
	Dim      int64 `json:"dim,omitempty"`
	Hidden   int64 `json:"hidden,omitempty"`
	Vocab    int64 `json:"vocab,omitempty"`
	Heads    int64 `json:"heads,omitempty"`
	KVHeads  int64 `json:"kv_heads,omitempty"`
	HeadDim  int64 `json:"head_dim,omitempty"`
	Kernel   int64 `json:"kernel,omitempty"`
	Stride   int64 `json:"stride,omitempty"`
	Padding  int64 `json:"padding,omitempty"`
	Channels int64 `json:"channels,omitempty"`
	Max      int64 `json:"max,omitempty"`
	Times    int64 `json:"times,omitempty"`
	// Experts and TopK size a mixture-of-experts layer; Shared is the
	// intermediate size of its always-on shared expert (0: none), with a
	// sigmoid gate when SharedGate is set.
	Experts    int64   `json:"experts,omitempty"`
	TopK       int64   `json:"top_k,omitempty"`
	Shared     int64   `json:"shared,omitempty"`
	SharedGate bool    `json:"shared_gate,omitempty"`
	P          float64 `json:"p,omitempty"`
	Bias       bool    `json:"bias,omitempty"`
	OutBias    bool    `json:"out_bias,omitempty"`
	RoPE       bool    `json:"rope,omitempty"`
	// Rotary is the fraction of head_dim that RoPE rotates (0: all).
	Rotary   float64 `json:"rotary,omitempty"`
	Causal   bool    `json:"causal,omitempty"`
	FusedQKV bool    `json:"fused_qkv,omitempty"`
	// QKNorm applies RMSNorm over head_dim to queries and keys.
	QKNorm bool `json:"qk_norm,omitempty"`
	// KVCache marks attention that fills a key/value cache in training
	// (transformers' GPT-2 with use_cache=True).
	KVCache bool `json:"kv_cache,omitempty"`
	// Inplace marks a ReLU or a residual add done in place (torchvision).
	Inplace bool `json:"inplace,omitempty"`
	Upcast  bool `json:"upcast,omitempty"`
	// Softcap caps an lm_head's logits: softcap·tanh(logits/softcap).
	Softcap float64 `json:"softcap,omitempty"`
	// Style selects an implementation whose saved tensors differ:
	// attention "hf" (transformers) or "torch" (nn.MultiheadAttention).
	Style string `json:"style,omitempty"`
	// Activation of a gated MLP.
	Activation string `json:"activation,omitempty"`
	// Name labels a layer whose weight another layer ties to (Tie).
	Name string `json:"name,omitempty"`
	Tie  string `json:"tie,omitempty"`

	// Body holds the layers of repeat, block and residual; Shortcut the
	// projection on a residual's skip path (empty: identity).
	Body     []Layer `json:"layers,omitempty"`
	Shortcut []Layer `json:"shortcut,omitempty"`
	// Branches are a fork's parallel paths; their outputs are summed.
	Branches [][]Layer `json:"branches,omitempty"`
}

// Layer kinds.
const (
	KLinear     = "linear"
	KConv2d     = "conv2d"
	KBatchNorm  = "batchnorm2d"
	KLayerNorm  = "layernorm"
	KRMSNorm    = "rmsnorm"
	KReLU       = "relu"
	KGELU       = "gelu"
	KGELUNew    = "gelu_new"
	KSiLU       = "silu"
	KTanh       = "tanh"
	KDropout    = "dropout"
	KEmbedding  = "embedding"
	KPositions  = "positions"
	KTokenTypes = "token_types"
	KAttention  = "attention"
	KGatedMLP   = "gated_mlp"
	KMoE        = "moe"
	KMaxPool    = "maxpool2d"
	KAvgPool    = "avgpool"
	KFlatten    = "flatten"
	KPatchEmbed = "patch_embed"
	KClsToken   = "cls_token"
	KTakeCls    = "take_cls"
	KLMHead     = "lm_head"
	KRepeat     = "repeat"
	KBlock      = "block"
	KResidual   = "residual"
	KFork       = "fork"
)

// kindSpec lists, per kind, its arguments: required ones and optional ones
// with defaults applied by the decoder.
type kindSpec struct {
	required []string
	optional []string
	doc      string
}

var layerKinds = map[string]kindSpec{
	KLinear:     {[]string{"in", "out"}, []string{"bias", "name"}, "y = x·Wᵀ + b over the last dimension (bias defaults to true)"},
	KConv2d:     {[]string{"in", "out", "kernel"}, []string{"stride", "padding", "bias"}, "2-D convolution, NCHW"},
	KBatchNorm:  {[]string{"channels"}, nil, "BatchNorm2d in training mode"},
	KLayerNorm:  {[]string{"dim"}, []string{"bias"}, "LayerNorm over the last dimension"},
	KRMSNorm:    {[]string{"dim"}, nil, "RMSNorm as transformers writes it (fp32 compute)"},
	KReLU:       {nil, []string{"inplace"}, "ReLU (inplace: true modifies its input, as torchvision does)"},
	KGELU:       {nil, nil, "GELU (erf), one kernel"},
	KGELUNew:    {nil, nil, "tanh-approximated GELU written out in Python, as transformers' gelu_new"},
	KSiLU:       {nil, nil, "SiLU"},
	KTanh:       {nil, nil, "tanh"},
	KDropout:    {[]string{"p"}, nil, "dropout (saves a 1-byte mask)"},
	KEmbedding:  {[]string{"vocab", "dim"}, []string{"name"}, "token embedding: ids → vectors"},
	KPositions:  {[]string{"max", "dim"}, nil, "learned absolute positions added to the stream"},
	KTokenTypes: {[]string{"max", "dim"}, nil, "learned token-type embedding added to the stream"},
	KAttention:  {[]string{"dim", "heads"}, []string{"kv_heads", "head_dim", "bias", "out_bias", "rope", "causal", "fused_qkv", "qk_norm", "kv_cache", "p", "style"}, "multi-head self-attention with its projections"},
	KGatedMLP:   {[]string{"dim", "hidden"}, []string{"activation", "bias"}, "down(act(gate(x)) * up(x)), SwiGLU when activation is silu"},
	KMoE:        {[]string{"dim", "hidden", "experts", "top_k"}, []string{"shared", "shared_gate", "activation", "bias"}, "mixture of gated-MLP experts with a top-k router (transformers' eager expert loop); shared: an always-on shared expert's size"},
	KMaxPool:    {[]string{"kernel"}, []string{"stride", "padding"}, "2-D max pooling"},
	KAvgPool:    {nil, nil, "global average pooling to 1×1"},
	KFlatten:    {nil, nil, "flatten to one dimension per sample"},
	KPatchEmbed: {[]string{"channels", "dim", "kernel"}, nil, "ViT patch embedding: a conv with stride = kernel, then tokens"},
	KClsToken:   {[]string{"dim"}, nil, "prepend a learned class token"},
	KTakeCls:    {nil, nil, "keep the first token only"},
	KLMHead:     {[]string{"vocab", "dim"}, []string{"bias", "tie", "upcast", "softcap"}, "vocabulary projection; tie names an embedding; upcast casts logits to fp32 before the loss (transformers' causal LM loss)"},
	KRepeat:     {[]string{"times", "layers"}, nil, "a block repeated; each copy has its own weights and is one checkpointing unit"},
	KBlock:      {[]string{"layers"}, nil, "a group of layers that is one checkpointing unit"},
	KFork:       {[]string{"branches"}, nil, "parallel branches on the same input, summed (GPT-NeoX and Falcon blocks); written - fork: [[...], [...]]"},
	KResidual:   {[]string{"layers"}, []string{"shortcut", "inplace"}, "x + f(x), or shortcut(x) + f(x); inplace adds into f(x)'s output"},
}

// LayerKinds returns the accepted layer kinds with one line each.
func LayerKinds() map[string]string {
	m := map[string]string{}
	for k, s := range layerKinds {
		m[k] = s.doc
	}
	return m
}

// Params counts the trainable parameters of a layer tree. Tied weights count
// once.
func Params(layers []Layer) int64 {
	var n int64
	for _, l := range layers {
		n += l.params()
	}
	return n
}

// params counts a layer's parameters. Spec validation bounds paramsF
// first, so the int64 arithmetic here cannot overflow.
func (l *Layer) params() int64 { return int64(l.paramsF()) }

// paramsF is params in float64, safe on sizes that would overflow int64.
func (l *Layer) paramsF() float64 {
	f := func(v int64) float64 { return float64(v) }
	bias := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	switch l.Kind {
	case KLinear:
		return f(l.In)*f(l.Out) + bias(l.Bias)*f(l.Out)
	case KConv2d:
		return f(l.Out)*f(l.In)*f(l.Kernel)*f(l.Kernel) + bias(l.Bias)*f(l.Out)
	case KBatchNorm:
		return 2 * f(l.Channels)
	case KLayerNorm:
		return f(l.Dim) * (1 + bias(l.Bias))
	case KRMSNorm:
		return f(l.Dim)
	case KEmbedding:
		return f(l.Vocab) * f(l.Dim)
	case KPositions, KTokenTypes:
		return f(l.Max) * f(l.Dim)
	case KAttention:
		q, kv := f(l.Heads)*f(l.HeadDim), f(l.KVHeads)*f(l.HeadDim)
		d := f(l.Dim)
		n := d*(q+2*kv) + bias(l.Bias)*(q+2*kv) + q*d + bias(l.OutBias)*d
		if l.QKNorm {
			n += 2 * f(l.HeadDim)
		}
		return n
	case KGatedMLP:
		return 3*f(l.Dim)*f(l.Hidden) + bias(l.Bias)*(2*f(l.Hidden)+f(l.Dim))
	case KMoE:
		d := f(l.Dim)
		n := d*f(l.Experts) + f(l.Experts)*3*d*f(l.Hidden)
		if l.Shared > 0 {
			n += 3 * d * f(l.Shared)
			if l.SharedGate {
				n += d
			}
		}
		return n
	case KPatchEmbed:
		return f(l.Dim)*f(l.Channels)*f(l.Kernel)*f(l.Kernel) + f(l.Dim)
	case KClsToken:
		return f(l.Dim)
	case KLMHead:
		n := bias(l.Bias) * f(l.Vocab)
		if l.Tie == "" {
			n += f(l.Vocab) * f(l.Dim)
		}
		return n
	case KRepeat:
		return f(l.Times) * paramsFloat(l.Body)
	case KBlock:
		return paramsFloat(l.Body)
	case KResidual:
		return paramsFloat(l.Body) + paramsFloat(l.Shortcut)
	case KFork:
		var n float64
		for _, b := range l.Branches {
			n += paramsFloat(b)
		}
		return n
	}
	return 0
}

// Shape is the shape of one sample's activation, batch excluded:
// [features], [tokens, width] or [channels, height, width].
type Shape []int64

func (s Shape) String() string { return fmt.Sprint([]int64(s)) }

// Elems is the number of elements of one sample.
func (s Shape) Elems() int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

func (s Shape) last() int64 { return s[len(s)-1] }

func convOut(in, k, stride, pad int64) int64 { return (in+2*pad-k)/stride + 1 }

// shapeErr is returned by InferShape with the line of the offending layer.
type shapeErr struct {
	line int
	msg  string
}

func (e *shapeErr) Error() string { return e.msg }

func bad(l *Layer, format string, args ...any) error {
	return &shapeErr{l.Line, fmt.Sprintf(l.Kind+": "+format, args...)}
}

// InferShape walks the layers from an input shape and returns the output
// shape, checking that each layer fits what it receives. Names collects
// embedding names for ties.
func InferShape(layers []Layer, in Shape, names map[string]*Layer) (Shape, error) {
	s := in
	for i := range layers {
		l := &layers[i]
		var err error
		if s, err = l.Infer(s, names); err != nil {
			return nil, err
		}
		if n, err := checkedElems(s); err != nil || n <= 0 {
			return nil, bad(l, "activation shape %v is empty or too large", s)
		}
	}
	return s, nil
}

func checkedElems(s Shape) (int64, error) {
	n := int64(1)
	for _, d := range s {
		if d <= 0 {
			return 0, nil
		}
		if n > math.MaxInt64/d {
			return 0, fmt.Errorf("overflow")
		}
		n *= d
	}
	return n, nil
}

// Infer returns the shape a single layer gives for input shape s. names
// holds the embeddings seen so far, for ties.
func (l *Layer) Infer(s Shape, names map[string]*Layer) (Shape, error) {
	tokens := len(s) == 2
	needTokens := func() error {
		if !tokens {
			return bad(l, "needs a [tokens, width] input, got %v", s)
		}
		return nil
	}
	needWidth := func(w int64, what string) error {
		if s.last() != w {
			return bad(l, "%s (%d) does not match the input width (%d)", what, w, s.last())
		}
		return nil
	}
	switch l.Kind {
	case KLinear:
		if err := needWidth(l.In, "in"); err != nil {
			return nil, err
		}
		out := append(Shape(nil), s...)
		out[len(out)-1] = l.Out
		return out, nil
	case KConv2d, KMaxPool, KPatchEmbed:
		if len(s) != 3 {
			return nil, bad(l, "needs a [channels, height, width] input, got %v", s)
		}
		ch := s[0]
		switch l.Kind {
		case KConv2d:
			if l.In != ch {
				return nil, bad(l, "in (%d) does not match the input channels (%d)", l.In, ch)
			}
			ch = l.Out
		case KPatchEmbed:
			if l.Channels != ch {
				return nil, bad(l, "channels (%d) does not match the input channels (%d)", l.Channels, ch)
			}
			if s[1]%l.Kernel != 0 || s[2]%l.Kernel != 0 {
				return nil, bad(l, "kernel (%d) must divide the image size (%d×%d)", l.Kernel, s[1], s[2])
			}
			return Shape{(s[1] / l.Kernel) * (s[2] / l.Kernel), l.Dim}, nil
		}
		h, w := convOut(s[1], l.Kernel, l.Stride, l.Padding), convOut(s[2], l.Kernel, l.Stride, l.Padding)
		if h <= 0 || w <= 0 {
			return nil, bad(l, "kernel %d is larger than the %d×%d input", l.Kernel, s[1], s[2])
		}
		return Shape{ch, h, w}, nil
	case KBatchNorm:
		if len(s) != 3 || s[0] != l.Channels {
			return nil, bad(l, "channels (%d) does not match the input %v", l.Channels, s)
		}
		return s, nil
	case KLayerNorm, KRMSNorm:
		return s, needWidth(l.Dim, "dim")
	case KReLU, KGELU, KGELUNew, KSiLU, KTanh, KDropout:
		return s, nil
	case KEmbedding:
		if len(s) != 1 {
			return nil, bad(l, "needs token ids as input")
		}
		if l.Name != "" {
			names[l.Name] = l
		}
		return Shape{s[0], l.Dim}, nil
	case KPositions, KTokenTypes:
		if err := needTokens(); err != nil {
			return nil, err
		}
		if l.Kind == KPositions && s[0] > l.Max {
			return nil, bad(l, "sequence length %d exceeds max positions %d", s[0], l.Max)
		}
		return s, needWidth(l.Dim, "dim")
	case KAttention:
		if err := needTokens(); err != nil {
			return nil, err
		}
		return s, needWidth(l.Dim, "dim")
	case KGatedMLP:
		return s, needWidth(l.Dim, "dim")
	case KMoE:
		if l.TopK > l.Experts {
			return nil, bad(l, "top_k (%d) exceeds experts (%d)", l.TopK, l.Experts)
		}
		return s, needWidth(l.Dim, "dim")
	case KAvgPool:
		if len(s) != 3 {
			return nil, bad(l, "needs a [channels, height, width] input, got %v", s)
		}
		return Shape{s[0], 1, 1}, nil
	case KFlatten:
		return Shape{s.Elems()}, nil
	case KClsToken:
		if err := needTokens(); err != nil {
			return nil, err
		}
		return Shape{s[0] + 1, s[1]}, needWidth(l.Dim, "dim")
	case KTakeCls:
		if err := needTokens(); err != nil {
			return nil, err
		}
		return Shape{s[1]}, nil
	case KLMHead:
		if err := needWidth(l.Dim, "dim"); err != nil {
			return nil, err
		}
		if l.Tie != "" {
			e, ok := names[l.Tie]
			if !ok {
				return nil, bad(l, "tie %q names no earlier embedding", l.Tie)
			}
			if e.Vocab != l.Vocab || e.Dim != l.Dim {
				return nil, bad(l, "tied to %q of %d×%d, but the head is %d×%d", l.Tie, e.Vocab, e.Dim, l.Vocab, l.Dim)
			}
		}
		out := append(Shape(nil), s...)
		out[len(out)-1] = l.Vocab
		return out, nil
	case KRepeat:
		out, err := InferShape(l.Body, s, names)
		if err != nil {
			return nil, err
		}
		if l.Times > 1 && !slices.Equal(out, s) {
			return nil, bad(l, "a repeated block must keep its shape, but %v becomes %v", s, out)
		}
		return out, nil
	case KBlock:
		return InferShape(l.Body, s, names)
	case KFork:
		var out Shape
		for i, b := range l.Branches {
			o, err := InferShape(b, s, names)
			if err != nil {
				return nil, err
			}
			if i > 0 && !slices.Equal(o, out) {
				return nil, bad(l, "branch %d gives %v but branch 1 gives %v", i+1, o, out)
			}
			out = o
		}
		if len(l.Branches) == 0 {
			return nil, bad(l, "needs at least one branch")
		}
		return out, nil
	case KResidual:
		body, err := InferShape(l.Body, s, names)
		if err != nil {
			return nil, err
		}
		short := s
		if len(l.Shortcut) > 0 {
			if short, err = InferShape(l.Shortcut, s, names); err != nil {
				return nil, err
			}
		}
		if !slices.Equal(body, short) {
			return nil, bad(l, "the branch gives %v but the skip path gives %v", body, short)
		}
		return body, nil
	}
	return nil, bad(l, "unknown layer kind")
}

// Count is the number of layer instances once repeats are expanded,
// saturating at max.
func Count(layers []Layer, limit int64) int64 {
	var n int64
	for _, l := range layers {
		switch l.Kind {
		case KRepeat:
			c := Count(l.Body, limit)
			if c > 0 && l.Times > limit/c {
				return limit
			}
			n += l.Times * c
		case KBlock, KResidual:
			n += Count(l.Body, limit) + Count(l.Shortcut, limit) + 1
		case KFork:
			for _, b := range l.Branches {
				n += Count(b, limit)
			}
			n++
		default:
			n++
		}
		if n >= limit {
			return limit
		}
	}
	return n
}

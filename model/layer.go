package model

import (
	"fmt"
	"math"
	"sort"
)

// Layer is one node of the explicit layer tree. Shorthand models are lowered
// to the same tree (see Lower), so every kind can be written by hand. Spec
// holds the kind's own arguments (a *Linear, an *Attention, …); Body,
// Shortcut and Branches hold the layers of the container kinds (repeat,
// block, residual, fork).
type Layer struct {
	Kind string
	// Line is the spec line the layer came from; 0 for lowered shorthands.
	Line int
	Spec KindSpec

	// Body holds the layers of repeat, block and residual; Shortcut the
	// projection on a residual's skip path (empty: identity).
	Body     []Layer
	Shortcut []Layer
	// Branches are a fork's parallel paths; their outputs are summed.
	Branches [][]Layer
	// Registered places the layer's parameters among those of its block
	// (a repeat's body) in module registration order, the order of
	// module.named_parameters() and of DDP's initial broadcast: 1 after
	// the block's other layers, 0 in forward order. transformers' Llama
	// decoder layers register self_attn and mlp before their norms.
	Registered int8
}

// KindSpec is what one layer kind declares, in one place: its arguments
// (the struct's fields), how they are read from a spec, the shape it gives
// and its parameter count. Each kind's file registers it (register), which
// is all the model package needs to accept the kind; the estimate package
// simulates it from the same struct.
type KindSpec interface {
	// Kind is the name written in specs.
	Kind() string
	// decode reads the arguments and applies defaults.
	decode(a *args, l *Layer)
	// infer returns the shape the layer gives for input shape s. names
	// holds the embeddings seen so far, for ties; nil skips those checks.
	infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error)
	// params counts the layer's parameters in float64 (safe on sizes that
	// would overflow int64), its body included.
	params(l *Layer) float64
}

// L makes a layer of a kind, with an optional body (repeat, block,
// residual).
func L(k KindSpec, body ...Layer) Layer { return Layer{Kind: k.Kind(), Spec: k, Body: body} }

// kindInfo is a registered kind: a constructor with its defaults and one
// line of documentation.
type kindInfo struct {
	new func() KindSpec
	doc string
}

var layerKinds = map[string]kindInfo{}

// register adds a layer kind; each kind's file calls it from init.
func register(name, doc string, new func() KindSpec) {
	if _, dup := layerKinds[name]; dup {
		panic("model: layer kind registered twice: " + name)
	}
	layerKinds[name] = kindInfo{new, doc}
}

// LayerKinds returns the accepted layer kinds with one line each.
func LayerKinds() map[string]string {
	m := map[string]string{}
	for k, s := range layerKinds {
		m[k] = s.doc
	}
	return m
}

func kindNames() []string {
	var names []string
	for k := range layerKinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Params counts the trainable parameters of a layer tree. Tied weights count
// once. Spec validation bounds the float64 count first, so the int64 result
// cannot overflow.
func Params(layers []Layer) int64 { return int64(paramsFloat(layers)) }

func paramsFloat(ls []Layer) float64 {
	var n float64
	for i := range ls {
		n += ls[i].Spec.params(&ls[i])
	}
	return n
}

func f64(v int64) float64 { return float64(v) }

func b64(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Shape is the shape of one sample's activation, batch excluded:
// [features], [tokens, width], [channels, length] or [channels, height,
// width].
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

// shapeErr is returned by InferShape with the line of the offending layer.
type shapeErr struct {
	line int
	msg  string
}

func (e *shapeErr) Error() string { return e.msg }

func bad(l *Layer, format string, args ...any) error {
	return &shapeErr{l.Line, fmt.Sprintf(l.Kind+": "+format, args...)}
}

// needTokens checks for a [tokens, width] input.
func needTokens(l *Layer, s Shape) error {
	if len(s) != 2 {
		return bad(l, "needs a [tokens, width] input, got %v", s)
	}
	return nil
}

// needWidth checks the input's last dimension.
func needWidth(l *Layer, s Shape, w int64, what string) error {
	if s.last() != w {
		return bad(l, "%s (%d) does not match the input width (%d)", what, w, s.last())
	}
	return nil
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
// holds the embeddings seen so far, for ties; with nil names ties are not
// checked.
func (l *Layer) Infer(s Shape, names map[string]*Layer) (Shape, error) {
	if l.Spec == nil {
		return nil, bad(l, "unknown layer kind")
	}
	return l.Spec.infer(l, s, names)
}

// Count is the number of layer instances once repeats are expanded,
// saturating at max.
func Count(layers []Layer, limit int64) int64 {
	var n int64
	for _, l := range layers {
		switch k := l.Spec.(type) {
		case *Repeat:
			c := Count(l.Body, limit)
			if c > 0 && k.Times > limit/c {
				return limit
			}
			n += k.Times * c
		case *Block, *Residual:
			n += Count(l.Body, limit) + Count(l.Shortcut, limit) + 1
		case *Fork:
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

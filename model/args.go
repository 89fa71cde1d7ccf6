package model

import (
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// args reads one layer's arguments for its kind's decode method. A layer
// written without arguments ("- relu") has no mapping: then reads only
// note the first required field, which decodeLayer reports as missing.
type args struct {
	e       *errs
	m       *mapping // nil when the layer has no arguments
	kind    string
	line    int
	missing string // the first required field of a layer without arguments
}

func (a *args) none(key string, required bool) bool {
	if a.m != nil {
		return false
	}
	if required && a.missing == "" {
		a.missing = key
	}
	return true
}

// int reads a positive integer.
func (a *args) int(key string, dst *int64, required bool) {
	if !a.none(key, required) {
		a.m.int(key, dst, required)
	}
}

// count reads a whole number ≥ 0 (padding).
func (a *args) count(key string, dst *int64) {
	if a.none(key, false) {
		return
	}
	if v := a.m.get(key); v != nil {
		p, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || p < 0 {
			a.e.add(v.Line, "%s: want a whole number ≥ 0, got %s", key, describe(v))
		}
		*dst = p
	}
}

// float reads a number in [lo, hi]; a required one must be present.
func (a *args) float(key string, dst *float64, lo, hi float64, required bool) {
	if a.none(key, required) {
		return
	}
	if required && !a.m.has(key) {
		a.e.add(a.line, "%s: missing required field %q", a.kind, key)
	}
	a.m.float(key, dst, lo, hi)
}

func (a *args) bool(key string, dst *bool) {
	if !a.none(key, false) {
		a.m.bool(key, dst)
	}
}

// str reads a string; ok says it was given.
func (a *args) str(key string, dst *string) (line int, ok bool) {
	if a.none(key, false) {
		return 0, false
	}
	return a.m.str(key, dst)
}

// layers reads a list of layers.
func (a *args) layers(key, what string, dst *[]Layer, required bool) {
	if a.none(key, required) {
		return
	}
	if v := a.m.get(key); v != nil {
		*dst = decodeLayers(a.e, v, what)
	} else if required {
		a.e.add(a.line, "%s: missing required field %q", a.kind, key)
	}
}

// activationArg reads a gated MLP's activation (default silu).
func (a *args) activationArg(dst *string) {
	*dst = KSiLU
	if line, ok := a.str("activation", dst); ok {
		switch *dst {
		case KSiLU, KGELU, KGELUNew, KReLU, KTanh:
		default:
			a.e.add(line, "activation: unknown activation %q (valid: gelu, gelu_new, relu, silu, tanh)", *dst)
		}
	}
}

// listDecoder is a kind written with a list instead of a mapping of
// arguments (block and residual take their layers; fork its branches).
type listDecoder interface {
	// decodeList reads the layer's arguments node n (nil when none);
	// done says it handled them, ok that they were valid.
	decodeList(e *errs, n *yaml.Node, l *Layer) (done, ok bool)
}

// decodeLayers reads the explicit form's list of layers.
func decodeLayers(e *errs, n *yaml.Node, what string) []Layer {
	if n.Kind != yaml.SequenceNode {
		e.add(n.Line, "%s: want a list of layers, got %s", what, describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		e.add(n.Line, "%s: the list of layers is empty", what)
	}
	var out []Layer
	for _, c := range n.Content {
		if l, ok := decodeLayer(e, c); ok {
			out = append(out, l)
		}
	}
	return out
}

func decodeLayer(e *errs, n *yaml.Node) (Layer, bool) {
	l := Layer{Line: n.Line}
	var an *yaml.Node
	switch {
	case n.Kind == yaml.ScalarNode:
		l.Kind = n.Value
	case n.Kind == yaml.MappingNode && len(n.Content) == 2:
		l.Kind, an = n.Content[0].Value, n.Content[1]
	default:
		e.add(n.Line, "layer: want \"- kind\" or \"- kind: {arguments}\", got %s", describe(n))
		return l, false
	}
	ki, ok := layerKinds[l.Kind]
	if !ok {
		names := kindNames()
		msg := fmt.Sprintf("unknown layer %q", l.Kind)
		if s := suggest(l.Kind, names); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		e.add(n.Line, "%s (valid: %s)", msg, oneOf(names))
		return l, false
	}
	l.Spec = ki.new()
	if an != nil && an.Tag == "!!null" {
		an = nil
	}
	if ld, isList := l.Spec.(listDecoder); isList {
		if done, ok := ld.decodeList(e, an, &l); done {
			return l, ok
		}
	}
	a := &args{e: e, kind: l.Kind, line: n.Line}
	if an != nil {
		a.line = an.Line
		a.m = newMapping(e, an, l.Kind)
		if an.Kind != yaml.MappingNode {
			return l, false
		}
	}
	l.Spec.decode(a, &l)
	if a.m == nil {
		if a.missing != "" {
			e.add(n.Line, "%s: missing required field %q", l.Kind, a.missing)
			return l, false
		}
		return l, true
	}
	a.m.finish()
	if v, ok := l.Spec.(interface{ validate(e *errs, line int) }); ok {
		v.validate(e, n.Line)
	}
	return l, true
}

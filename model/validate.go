package model

import (
	"math"
)

// MaxLayers bounds the layer instances of a model once repeats are
// expanded (the largest published models have a few thousand).
const MaxLayers = 200_000

// maxParams keeps parameter counts exact in float64 as well as int64.
const maxParams = float64(1 << 50)

// maxBytes bounds every byte count memplan computes: past it, sums of a few
// of them could wrap around int64.
const maxBytes = float64(1 << 60)

// validate checks relations between fields and that byte counts fit.
func validate(e *errs, s *Spec, modelLine, trainLine int) {
	m, t := &s.Model, &s.Training
	at := func(field string) int {
		if l, ok := m.lines[field]; ok {
			return l
		}
		return modelLine
	}
	switch m.Type {
	case GPT2, Llama, BERT, ViT, NeoX:
		if m.Heads > 0 && m.Hidden%m.Heads != 0 && !(m.Type == Llama && m.HeadDim > 0) {
			e.add(at("heads"), "heads (%d) must divide hidden (%d)", m.Heads, m.Hidden)
		}
		if (m.Type == Llama || m.Type == NeoX) && m.KVHeads > 0 && m.Heads%m.KVHeads != 0 {
			e.add(at("kv_heads"), "kv_heads (%d) must divide heads (%d)", m.KVHeads, m.Heads)
		}
	}
	if m.Type == ViT {
		if t.Image%m.Patch != 0 {
			e.add(trainLine, "image (%d) must be a multiple of patch (%d)", t.Image, m.Patch)
			return
		}
		g := t.Image / m.Patch
		m.Positions = g*g + 1
	}
	if m.TokenInput() && m.Positions > 0 && t.Seq > m.Positions {
		e.add(trainLine, "seq (%d) exceeds the model's positions (%d)", t.Seq, m.Positions)
	}
	if len(e.list) > 0 {
		return
	}
	// Rough upper bound of the bytes involved, in float64 so that it cannot
	// wrap: parameters at 40 bytes each, and every activation element at 64
	// bytes.
	layers := m.Lower()
	in := s.InputShape()
	names := map[string]*Layer{}
	out, err := InferShape(layers, in, names)
	if err != nil {
		line := modelLine
		if se, ok := err.(*shapeErr); ok && se.line > 0 {
			line = se.line
		}
		e.add(line, "%v", err)
		return
	}
	_ = out
	if n := Count(layers, MaxLayers+1); n > MaxLayers {
		e.add(modelLine, "more than %d layers once repeats are expanded; memplan simulates each one", MaxLayers)
		return
	}
	params := paramsFloat(layers)
	acts := actFloat(layers, in) * float64(t.Batch)
	if params > maxParams || params*40+acts*64 > maxBytes || math.IsInf(acts, 0) {
		e.add(modelLine, "sizes too large: %.3g parameters and %.3g activation elements would overflow 64-bit byte counts", params, acts)
	}
}

// actFloat sums per-sample activation elements, with the attention score
// matrix, as a float64 upper bound.
func actFloat(ls []Layer, s Shape) float64 {
	var n float64
	for i := range ls {
		l := &ls[i]
		switch k := l.Spec.(type) {
		case *Repeat:
			n += float64(k.Times) * actFloat(l.Body, s)
		case *Block, *Residual:
			n += actFloat(l.Body, s) + actFloat(l.Shortcut, s)
		case *Fork:
			for _, b := range l.Branches {
				n += actFloat(b, s)
			}
		case *Attention:
			n += float64(s[0]) * float64(s[0]) * float64(k.Heads)
		}
		out, err := l.Infer(s, map[string]*Layer{"": {}})
		if err == nil {
			s = out
		}
		w := 1.0
		for _, d := range s {
			w *= float64(d)
		}
		n += 8 * w
	}
	return n
}

// InputShape is the shape of one sample entering the model.
func (s *Spec) InputShape() Shape {
	m, t := &s.Model, &s.Training
	switch {
	case m.TokenInput():
		return Shape{t.Seq}
	case m.Type == Sequential && m.Input.Kind == InputSignal:
		return Shape{m.Input.Channels, t.Seq}
	case m.ImageInput():
		c := m.Channels
		if m.Type == Sequential {
			c = m.Input.Channels
		}
		return Shape{c, t.Image, t.Image}
	}
	return Shape{m.Input.Features}
}

// Params is the number of trainable parameters.
func (s *Spec) Params() int64 { return Params(s.Model.Lower()) }

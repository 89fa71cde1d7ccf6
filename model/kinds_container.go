package model

import (
	"slices"

	"gopkg.in/yaml.v3"
)

// Container kinds: their layers are in Layer.Body, Layer.Shortcut and
// Layer.Branches.

// Layer kinds of this file.
const (
	KRepeat   = "repeat"
	KBlock    = "block"
	KResidual = "residual"
	KFork     = "fork"
)

func init() {
	register(KRepeat, "a block repeated; each copy has its own weights and is one checkpointing unit", func() KindSpec { return &Repeat{} })
	register(KBlock, "a group of layers that is one checkpointing unit", func() KindSpec { return &Block{} })
	register(KFork, "parallel branches on the same input, summed (GPT-NeoX and Falcon blocks); written - fork: [[...], [...]]", func() KindSpec { return &Fork{} })
	register(KResidual, "x + f(x), or shortcut(x) + f(x); inplace adds into f(x)'s output", func() KindSpec { return &Residual{} })
}

// Repeat is its body repeated Times times, each copy with its own weights.
type Repeat struct {
	Times int64
	// First is the model's index of the first copy (0; a pipeline stage's
	// share of the blocks starts later: model's stageSlice), for layers
	// that differ by index (Attention.SlidingAt).
	First int64
	// HoldInput keeps the first copy's input bound until the base model's
	// forward returns (BertModel.forward's embedding_output): until a
	// task head starts (Linear.Head) or the forward ends.
	HoldInput bool
}

// Kind is the name specs use for the kind.
func (*Repeat) Kind() string { return KRepeat }

func (k *Repeat) decode(a *args, l *Layer) {
	a.int("times", &k.Times, true)
	a.bool("hold_input", &k.HoldInput)
	a.layers("layers", KRepeat+".layers", &l.Body, true)
}

func (k *Repeat) infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error) {
	out, err := InferShape(l.Body, s, names)
	if err != nil {
		return nil, err
	}
	if k.Times > 1 && !slices.Equal(out, s) {
		return nil, bad(l, "a repeated block must keep its shape, but %v becomes %v", s, out)
	}
	return out, nil
}

func (k *Repeat) params(l *Layer) float64 { return f64(k.Times) * paramsFloat(l.Body) }

// Block is a group of layers that is one checkpointing unit.
type Block struct{}

// Kind is the name specs use for the kind.
func (*Block) Kind() string { return KBlock }

func (*Block) decode(a *args, l *Layer) { a.layers("layers", KBlock+".layers", &l.Body, true) }

// decodeList reads "- block: [layers]".
func (*Block) decodeList(e *errs, n *yaml.Node, l *Layer) (bool, bool) {
	return bodyList(e, n, l)
}

func bodyList(e *errs, n *yaml.Node, l *Layer) (bool, bool) {
	if n == nil || n.Kind != yaml.SequenceNode {
		return false, false
	}
	l.Body = decodeLayers(e, n, l.Kind)
	return true, true
}

func (*Block) infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error) {
	return InferShape(l.Body, s, names)
}

func (*Block) params(l *Layer) float64 { return paramsFloat(l.Body) }

// Residual is x + f(x), or shortcut(x) + f(x): f is the body. Inplace adds
// into f(x)'s output (torchvision's out += identity).
type Residual struct {
	Inplace bool
	// Hold keeps f(x)'s output alive until the next layer returns, as
	// post-norm code such as BERT's LayerNorm(h + x) keeps h bound to a
	// Python variable while the norm runs, and GPT-2's block keeps
	// attn_output until it returns (docs/spec.md).
	Hold bool
	// HoldFirst keeps the output of f's first layer (a pre-norm's norm)
	// alive until the add, as GPT-2's block keeps hidden_states =
	// ln_1(x) bound while the attention computes attn_output.
	HoldFirst bool
	// HoldFirstBody keeps the output of f's first layer alive until f's
	// last layer returns, before the add, as torchvision's EncoderBlock
	// binds y = ln_2(x) while y = self.mlp(y) runs.
	HoldFirstBody bool
	// HoldChunk, with Hold, also keeps the residual's input and the output
	// of f's second layer (its activation) alive until the next layer
	// returns, as BERT's feed_forward_chunk keeps attention_output and
	// intermediate_output bound while BertOutput's LayerNorm runs (which
	// matters when nothing saves them: a frozen base under LoRA).
	HoldChunk bool
	// ScaleBranch multiplies f(x) by a constant before the add, a new
	// tensor (Granite's residual_multiplier: residual + h · m).
	ScaleBranch bool
}

// Kind is the name specs use for the kind.
func (*Residual) Kind() string { return KResidual }

func (k *Residual) decode(a *args, l *Layer) {
	a.layers("layers", KResidual+".layers", &l.Body, true)
	a.layers("shortcut", "residual.shortcut", &l.Shortcut, false)
	a.bool("inplace", &k.Inplace)
	a.bool("hold", &k.Hold)
	a.bool("hold_first", &k.HoldFirst)
	a.bool("hold_first_body", &k.HoldFirstBody)
	a.bool("hold_chunk", &k.HoldChunk)
	a.bool("scale_branch", &k.ScaleBranch)
}

// decodeList reads "- residual: [layers]".
func (*Residual) decodeList(e *errs, n *yaml.Node, l *Layer) (bool, bool) {
	return bodyList(e, n, l)
}

func (*Residual) infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error) {
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

func (*Residual) params(l *Layer) float64 { return paramsFloat(l.Body) + paramsFloat(l.Shortcut) }

// Fork runs its branches on the same input and sums their outputs.
type Fork struct {
	// Hold keeps the branches' outputs alive until the enclosing
	// residual's add is made, as Phi's decoder layer binds attn_outputs
	// and feed_forward_hidden_states until it returns (after
	// attn_outputs + feed_forward_hidden_states + residual); set by the
	// neox shorthand for Phi (split_qkv), not a spec key.
	Hold bool
}

// Kind is the name specs use for the kind.
func (*Fork) Kind() string { return KFork }

func (*Fork) decode(*args, *Layer) {}

// decodeList reads "- fork: [[layers], [layers]]".
func (*Fork) decodeList(e *errs, n *yaml.Node, l *Layer) (bool, bool) {
	if n == nil || n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		e.add(l.Line, "fork: want a list of branches, each a list of layers: - fork: [[...], [...]]")
		return true, false
	}
	for _, b := range n.Content {
		l.Branches = append(l.Branches, decodeLayers(e, b, "fork branch"))
	}
	return true, true
}

func (*Fork) infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error) {
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
}

func (*Fork) params(l *Layer) float64 {
	var n float64
	for _, b := range l.Branches {
		n += paramsFloat(b)
	}
	return n
}

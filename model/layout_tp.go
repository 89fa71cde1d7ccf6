package model

import (
	"errors"
	"fmt"

	"github.com/memplan/memplan/parallel"
)

// Tensor and sequence parallelism: the training fields that ask for them
// and the lowering of a model to one rank's program (docs/parallelism.md
// §3.1). The lowered tree holds the rank's shares of the layers (a/t heads,
// ffn/t columns, V/t vocabulary rows) and the collectives DTensor issues
// between them, as layers of their own kinds, so that the estimator
// replays the rank's program with the same simulations as one GPU's.

// decodeLayout reads training.tp, sp, loss_parallel and cp and their
// command-line overrides, and checks them against the model's shape with
// the rules of parallel.CheckSplit.
func decodeLayout(e *errs, tm *mapping, t *Training, m *Model, o Overrides) {
	tm.int("tp", &t.TP, false)
	tm.bool("sp", &t.SP)
	tm.bool("loss_parallel", &t.LossParallel)
	tm.int("cp", &t.CP, false)
	flag := map[string]bool{"tp": o.TP > 0, "cp": o.CP > 0, "sp": o.SP, "loss_parallel": o.LossParallel}
	line := func(key string) int {
		if flag[key] {
			return 0 // from the command line
		}
		return lineOf(tm, key)
	}
	for _, ov := range []struct {
		v    int64
		dst  *int64
		flag string
	}{{o.TP, &t.TP, "tp"}, {o.CP, &t.CP, "cp"}} {
		if ov.v < 0 {
			e.add(0, "--%s: must be positive, got %d", ov.flag, ov.v)
		} else if ov.v > 0 {
			*ov.dst = ov.v
		}
	}
	t.SP = t.SP || o.SP
	t.LossParallel = t.LossParallel || o.LossParallel
	if t.TP < 0 || t.CP < 0 {
		e.add(line("tp"), "tp and cp must be positive")
		return
	}
	if t.LossParallel && t.TP < 2 {
		e.add(line("loss_parallel"), "loss_parallel: loss parallelism needs tp > 1")
	}
	if t.TP <= 1 && t.CP <= 1 {
		if t.SP {
			e.add(line("sp"), "sp: sequence parallelism needs tp > 1")
		}
		return
	}
	if why := m.TPRefusal(); why != "" {
		e.add(line("tp"), "tp, cp: tensor and context parallelism are simulated for llama models with separate q, k, v projections (torchtitan's plan), not %s", why)
		return
	}
	if why := m.SeqSplitRefusal(t); why != "" {
		key := "tp"
		if t.CP > 1 {
			key = "cp"
		}
		e.add(line(key), "%s: %s", key, why)
		return
	}
	seq := t.Seq
	if o.Seq > 0 {
		seq = o.Seq
	}
	err := parallel.CheckSplit(parallel.Split{Heads: m.Heads, KVHeads: m.KVHeads, Intermediate: m.Intermediate,
		Seq: seq, TP: t.TP, CP: t.CP, SP: t.SP})
	if err != nil {
		key := "tp"
		if t.TP <= 1 {
			key = "cp"
		}
		e.add(line(key), "%s: %v", key, err)
	}
}

// Collective operations of a lowered layout.
const (
	// OpGatherSeq all-gathers the sequence (Shard(1) → Replicate):
	// PrepareModuleInput before attention and the MLP, and the head's input
	// under sequence parallelism.
	OpGatherSeq = "all_gather_seq"
	// OpReduceScatterSeq reduces a partial sum and scatters the sequence
	// (Partial → Shard(1)): RowwiseParallel's output under sequence
	// parallelism.
	OpReduceScatterSeq = "reduce_scatter_seq"
	// OpAllReduce reduces a partial sum (Partial → Replicate):
	// RowwiseParallel's output without sequence parallelism.
	OpAllReduce = "all_reduce"
	// OpReplicate wraps a replicated input (ColwiseParallel's
	// input_layouts=Replicate): nothing in forward, an all-reduce of the
	// input's gradient in backward.
	OpReplicate = "replicate"
)

// KCollective is the layer kind of a lowered layout's collectives. It is
// not accepted in specs: only lowerings make it.
const KCollective = "collective"

// Collective is one collective a layout's rank issues between layers, over
// Ranks ranks, on the current stream (DTensor's functional collectives).
type Collective struct {
	Op    string
	Ranks int64
	// Opens marks the collective that takes a module's input (torchtitan's
	// PrepareModuleInput, or ColwiseParallel's input_layouts), and Closes
	// the module's output collective (RowwiseParallel's output_layouts):
	// both run inside the module's call, which holds the input it was
	// handed and the gathered tensor until it returns, after its output
	// collective (measured: the DeepSeek-V2-Lite sequence-parallel
	// histories, bench/results/2026-11-27-h200x4-tp-hf-sp).
	Opens, Closes bool
	// OutDropout is a dropout the module applies to the closing
	// collective's output before it returns, while its call still holds
	// its input (StarCoder2's residual dropout at the end of its attention
	// and its MLP; measured: StarCoder2-3B at tp 2, whose history frees the
	// gathered input after the dropout's output exists,
	// bench/results/2026-11-27-h200x2-tp-families).
	OutDropout float64
	// Holds keeps the output bound until the base model's forward returns
	// (the vocabulary-parallel embedding's reduction under Embedding.Hold).
	Holds bool
	// Each marks a module input whose module's column-parallel products
	// take it each (the attention's projections, an MLP's; not a mixture
	// of experts' wrapper or latent attention). On an OpReplicate, they
	// wrap the input themselves (ColwiseParallel's input hook on every
	// projection, with no PrepareModuleInput before the module: torchtitan's
	// and transformers' plans without sequence parallelism): one
	// DTensor.from_local per product, each all-reducing its own share of
	// the input's gradient into a new tensor in backward, which the
	// autograd engine then adds into the input's (docs/parallelism.md
	// §3.1.8). On an OpGatherSeq, they take the gathered DTensor that
	// PrepareModuleInput hands the module, whose gradient shares the
	// engine sums out of place; through transformers' forward (hftp.py)
	// its local part, which each wraps again as without sequence
	// parallelism (§3.1.9).
	Each bool
}

// Kind is the layer kind's name.
func (*Collective) Kind() string { return KCollective }

func (*Collective) decode(*args, *Layer) {}

func (k *Collective) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	switch k.Op {
	case OpGatherSeq:
		return Shape{s[0] * k.Ranks, s[1]}, nil
	case OpReduceScatterSeq:
		if s[0]%k.Ranks != 0 {
			return nil, bad(l, "sequence %d does not split over %d ranks", s[0], k.Ranks)
		}
		return Shape{s[0] / k.Ranks, s[1]}, nil
	}
	return s, nil
}

func (*Collective) params(*Layer) float64 { return 0 }

// KRescale is the layer kind of a constant multiply of the stream that a
// lowering splits from the layer it belonged to (not accepted in specs).
const KRescale = "rescale"

// Rescale multiplies its input by a constant, a new tensor: Granite's
// embedding scale, applied by the model's forward after the embedding
// module, so after a vocabulary-parallel embedding's reduction
// (Embedding.Scale; Gemma's module scales inside: VocabEmbedding.Scale).
// Hold keeps the product bound until the base model's forward returns
// (Embedding.Hold: Granite rebinds inputs_embeds to it).
type Rescale struct{ Hold bool }

// Kind is the layer kind's name.
func (*Rescale) Kind() string { return KRescale }

func (*Rescale) decode(*args, *Layer) {}

func (*Rescale) infer(_ *Layer, s Shape, _ map[string]*Layer) (Shape, error) { return s, nil }

func (*Rescale) params(*Layer) float64 { return 0 }

// KSoftcap is the layer kind of a logit softcap that a lowering splits
// from the head it belonged to (not accepted in specs).
const KSoftcap = "softcap"

// Softcap is cap·tanh(x/cap) over its input: Gemma 2's final logit
// softcap, which its CausalLM forward applies after the head, so after a
// pipeline's last stage's head too (pp.HFStage; LMHead.Softcap).
type Softcap struct{}

// Kind is the layer kind's name.
func (*Softcap) Kind() string { return KSoftcap }

func (*Softcap) decode(*args, *Layer) {}

func (*Softcap) infer(_ *Layer, s Shape, _ map[string]*Layer) (Shape, error) { return s, nil }

func (*Softcap) params(*Layer) float64 { return 0 }

// KVocabHead is the layer kind of a vocabulary-parallel head (not accepted
// in specs).
const KVocabHead = "vocab_parallel_head"

// VocabHead is ColwiseParallel's head over a vocabulary shard of Vocab rows
// (tied to an embedding when Tie names one) and the loss: Gather
// all-gathers the logits' vocabulary shards from Ranks ranks before the
// loss (output_layouts=Replicate); without it the loss is computed on the
// shards (loss_parallel). Output makes the logits (gathered, or the
// shard) the layer's output instead, as on a pipeline's last stage, whose
// schedule runs the loss. Uneven says the whole vocabulary does not divide
// over the ranks: the last rank's shard is smaller, and DTensor pads it to
// Vocab rows (a copy) before the all-gather; that rank is the one
// simulated (the busiest; Vocab rows are still its shard's).
type VocabHead struct {
	Vocab, Dim, Ranks      int64
	Tie                    string
	Gather, Output, Uneven bool
	// Softcap caps the logits (Gemma 2's final_logit_softcapping), after
	// the gather, before the loss: cap·tanh(logits/cap).
	Softcap float64
	// Scale divides the logits by a constant (Granite's logits_scaling),
	// after the gather, a new tensor.
	Scale bool
}

// Kind is the layer kind's name.
func (*VocabHead) Kind() string { return KVocabHead }

func (*VocabHead) decode(*args, *Layer) {}

func (k *VocabHead) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	if err := needWidth(l, s, k.Dim, "dim"); err != nil {
		return nil, err
	}
	switch {
	case k.Output && k.Gather:
		return Shape{s[0], k.Vocab * k.Ranks}, nil
	case k.Output:
		return Shape{s[0], k.Vocab}, nil
	}
	// The head computes the loss: its output is a scalar.
	return Shape{1}, nil
}

func (k *VocabHead) params(*Layer) float64 {
	if k.Tie != "" {
		return 0
	}
	return f64(k.Vocab) * f64(k.Dim)
}

// KVocabEmbedding is the layer kind of a vocabulary-parallel embedding
// (not accepted in specs).
const KVocabEmbedding = "vocab_parallel_embedding"

// VocabEmbedding is RowwiseParallel's embedding: the rank's Vocab rows of
// a Whole-row table, named Name for a tie; Tied says the head shares it.
// Its output is a partial sum (the rows other ranks hold are zero).
type VocabEmbedding struct {
	Vocab, Whole, Dim int64
	Name              string
	Tied              bool
	// Scale multiplies the rank's partial rows by a constant before they
	// are reduced, as Gemma 3's scaled embedding module does inside its
	// forward (Embedding.Scale; the models that scale after the module,
	// Gemma's and Granite's, get a Rescale after the reduction instead).
	Scale bool
}

// Kind is the layer kind's name.
func (*VocabEmbedding) Kind() string { return KVocabEmbedding }

func (*VocabEmbedding) decode(*args, *Layer) {}

func (k *VocabEmbedding) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if len(s) != 1 {
		return nil, bad(l, "needs token ids as input")
	}
	return Shape{s[0], k.Dim}, nil
}

func (k *VocabEmbedding) params(*Layer) float64 { return f64(k.Vocab) * f64(k.Dim) }

// ErrNotSplittable is wrapped by LowerRank for a model or layer that the
// layout's plan (tensor or context parallelism's) does not cover; the
// wrapping message says which and why.
var ErrNotSplittable = errors.New("the parallel layout does not split this model")

// LowerRank returns the layer tree one rank of a tensor-parallel layout
// runs (docs/parallelism.md §3.1): the model's lowering with its matrices
// split as torchtitan's apply_tp splits them and DTensor's collectives in
// between. Without tensor parallelism it is Lower.
func (m *Model) LowerRank(t *Training) ([]Layer, error) {
	return m.LowerRankOf(m.Lower(), t)
}

// LowerRankOf is LowerRank from ls, the model's lowering (Lower) the caller
// already holds, which it leaves as it is (and returns itself without
// tensor or context parallelism).
func (m *Model) LowerRankOf(ls []Layer, t *Training) ([]Layer, error) {
	return m.lowerLayers(ls, t)
}

// lowerLayers lowers ls, some of the model's top-level layers (all of
// them, or a pipeline stage's), to one rank's program under the
// training's tensor or context parallelism.
func (m *Model) lowerLayers(ls []Layer, t *Training) ([]Layer, error) {
	if t.TP <= 1 && t.CP <= 1 {
		return ls, nil
	}
	if why := m.TPRefusal(); why != "" {
		return nil, fmt.Errorf("%w: %s (torchtitan's plans for tensor and context parallelism are for Llama's block)", ErrNotSplittable, why)
	}
	if why := m.SeqSplitRefusal(t); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrNotSplittable, why)
	}
	if !m.RunsTransformersForward() {
		// transformers' forward keeps its sliding windows; torchtitan's
		// Llama has none.
		ls = titanAttention(ls)
	}
	if t.TP > 1 {
		// The rank's sequence (s/c under context parallelism, which the
		// spec's checks made divisible by 2·cp·tp).
		err := parallel.CheckSplit(parallel.Split{Heads: m.Heads, KVHeads: m.KVHeads, Intermediate: m.Intermediate,
			Seq: t.Seq, TP: t.TP, SP: t.SP})
		if err != nil {
			return nil, fmt.Errorf("tensor parallelism: %w", err)
		}
		tp := &tpLowering{t: t.TP, sp: t.SP, lp: t.LossParallel, tied: m.Tied, ep: t.EP > 1, scaleInside: m.Gemma}
		if ls, err = tp.layers(ls); err != nil {
			return nil, err
		}
	}
	if t.CP > 1 {
		// The rank's heads are tensor parallelism's; its tokens are
		// context parallelism's (the estimator runs the program at s/c).
		return lowerCP(ls, t.CP, m.RunsTransformersForward())
	}
	return ls, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ModelParallel describes the tensor-, context- and expert-parallel part
// of the setup for people, such as "tensor-parallel 2 with sequence and
// loss parallelism"; "" without any.
func (t Training) ModelParallel() string {
	if t.TP <= 1 && t.CP <= 1 && t.EP <= 1 {
		return ""
	}
	var s string
	if t.TP > 1 {
		s = fmt.Sprintf("tensor-parallel %d", t.TP)
		switch {
		case t.SP && t.LossParallel:
			s += " with sequence and loss parallelism"
		case t.SP:
			s += " with sequence parallelism"
		case t.LossParallel:
			s += " with loss parallelism"
		}
	}
	if t.CP > 1 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("context-parallel %d", t.CP)
	}
	if t.EP > 1 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("expert-parallel %d", t.EP)
	}
	return s
}

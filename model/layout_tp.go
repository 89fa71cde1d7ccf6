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

// Rescale multiplies its input by a constant, a new tensor: Gemma's and
// Granite's embedding scale, applied by the model's forward after the
// embedding module, so after a vocabulary-parallel embedding's reduction
// (Embedding.Scale; Gemma 3's module scales inside: VocabEmbedding.Scale).
type Rescale struct{}

// Kind is the layer kind's name.
func (*Rescale) Kind() string { return KRescale }

func (*Rescale) decode(*args, *Layer) {}

func (*Rescale) infer(_ *Layer, s Shape, _ map[string]*Layer) (Shape, error) { return s, nil }

func (*Rescale) params(*Layer) float64 { return 0 }

// KVocabHead is the layer kind of a vocabulary-parallel head (not accepted
// in specs).
const KVocabHead = "vocab_parallel_head"

// VocabHead is ColwiseParallel's head over a vocabulary shard of Vocab rows
// (tied to an embedding when Tie names one) and the loss: Gather
// all-gathers the logits' vocabulary shards from Ranks ranks before the
// loss (output_layouts=Replicate); without it the loss is computed on the
// shards (loss_parallel). Output makes the logits (gathered, or the
// shard) the layer's output instead, as on a pipeline's last stage, whose
// schedule runs the loss.
type VocabHead struct {
	Vocab, Dim, Ranks int64
	Tie               string
	Gather, Output    bool
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

// ErrNotSplittable is wrapped by LowerRank for a layer that tensor
// parallelism's plan does not cover.
var ErrNotSplittable = errors.New("tensor parallelism does not split this layer")

// LowerRank returns the layer tree one rank of a tensor-parallel layout
// runs (docs/parallelism.md §3.1): the model's lowering with its matrices
// split as torchtitan's apply_tp splits them and DTensor's collectives in
// between. Without tensor parallelism it is Lower.
func (m *Model) LowerRank(t *Training) ([]Layer, error) {
	return m.lowerLayers(m.Lower(), t)
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
	if !m.TPRunsTransformersForward() {
		// transformers' forward keeps its sliding windows; torchtitan's
		// Llama has none.
		ls = unwindowed(ls)
	}
	if t.TP > 1 {
		// The rank's sequence (s/c under context parallelism, which the
		// spec's checks made divisible by 2·cp·tp).
		err := parallel.CheckSplit(parallel.Split{Heads: m.Heads, KVHeads: m.KVHeads, Intermediate: m.Intermediate,
			Seq: t.Seq, TP: t.TP, SP: t.SP})
		if err != nil {
			return nil, fmt.Errorf("tensor parallelism: %w", err)
		}
		tp := &tpLowering{t: t.TP, sp: t.SP, lp: t.LossParallel, tied: m.Tied, ep: t.EP > 1, scaleInside: m.gemma3()}
		if ls, err = tp.layers(ls); err != nil {
			return nil, err
		}
	}
	if t.CP > 1 {
		// The rank's heads are tensor parallelism's; its tokens are
		// context parallelism's (the estimator runs the program at s/c).
		return lowerCP(ls, t.CP)
	}
	return ls, nil
}

type tpLowering struct {
	t            int64
	sp, lp, tied bool
	// scaleInside: the embedding module scales its rows (Gemma 3's).
	scaleInside bool
	// ep: the experts are split over ranks (expert parallelism), not by
	// columns: each tp rank routes its own sequence shard.
	ep bool
}

func (tp *tpLowering) coll(op string) Layer { return L(&Collective{Op: op, Ranks: tp.t}) }

// in is what enters a ColwiseParallel module: the sequence gathered, or a
// replicated input wrapped.
func (tp *tpLowering) in() Layer {
	if tp.sp {
		return tp.coll(OpGatherSeq)
	}
	return tp.coll(OpReplicate)
}

// out is what leaves a RowwiseParallel module: the partial sum reduced.
func (tp *tpLowering) out() Layer {
	if tp.sp {
		return tp.coll(OpReduceScatterSeq)
	}
	return tp.coll(OpAllReduce)
}

// module is body, the layers of one module (the attention, an MLP, a
// mixture of experts), between its collectives: in(), body, out(), the
// first opening the module's call and the last closing it
// (Collective.Opens).
func (tp *tpLowering) module(body ...Layer) []Layer {
	in, out := tp.in(), tp.out()
	in.Spec.(*Collective).Opens = true
	out.Spec.(*Collective).Closes = true
	return append(append([]Layer{in}, body...), out)
}

// plainMLP returns StarCoder2's two-layer MLP starting at ls[i] (c_fc,
// the activation, c_proj: model.Model.PlainMLP) as one rank runs it, c_fc
// split by columns (its bias with them) and c_proj by rows (its bias whole
// on every rank), as hftp.py's plan splits it; ok is false when ls[i] does
// not start one.
func (tp *tpLowering) plainMLP(ls []Layer, i int) (_ []Layer, ok bool) {
	if i+2 >= len(ls) {
		return nil, false
	}
	up, ok1 := ls[i].Spec.(*Linear)
	_, ok2 := ls[i+1].Spec.(*Activation)
	down, ok3 := ls[i+2].Spec.(*Linear)
	if !ok1 || !ok2 || !ok3 || up.Out != down.In || up.In != down.Out || up.Out%tp.t != 0 {
		return nil, false
	}
	u, d := *up, *down
	u.Out, d.In = up.Out/tp.t, down.In/tp.t
	return tp.module(L(&u), ls[i+1], L(&d)), true
}

// closeWith gives the closing collective that ends mod (tp.module's) the
// module's own dropout (Collective.OutDropout).
func closeWith(mod []Layer, p float64) []Layer {
	if p > 0 {
		c := *mod[len(mod)-1].Spec.(*Collective)
		c.OutDropout = p
		mod[len(mod)-1].Spec = &c
	}
	return mod
}

func (tp *tpLowering) layers(ls []Layer) ([]Layer, error) {
	var out []Layer
	for i := 0; i < len(ls); i++ {
		l := ls[i]
		switch k := l.Spec.(type) {
		case *Repeat, *Residual, *Block:
			body, err := tp.layers(l.Body)
			if err != nil {
				return nil, err
			}
			c := l
			c.Body = body
			out = append(out, c)
		case *Fork:
			// Cohere's parallel block: each branch a module of its own,
			// with its own collectives (hftp.py gathers the norm's output
			// for each).
			c := l
			c.Branches = make([][]Layer, len(l.Branches))
			for j, b := range l.Branches {
				body, err := tp.layers(b)
				if err != nil {
					return nil, err
				}
				c.Branches[j] = body
			}
			out = append(out, c)
		case *Linear:
			mlp, ok := tp.plainMLP(ls, i)
			if !ok {
				return nil, fmt.Errorf("%w: %s", ErrNotSplittable, l.Kind)
			}
			i += 2
			if i+1 < len(ls) {
				if d, ok := ls[i+1].Spec.(*Dropout); ok {
					// Starcoder2MLP's residual dropout, inside the module.
					mlp = closeWith(mlp, d.P)
					i++
				}
			}
			out = append(out, mlp...)
		case *Dropout, *Activation:
			// On the residual stream (the embeddings', a branch's output
			// after its reduction): the rank's sequence shard, or whole.
			out = append(out, l)
		case *Embedding:
			// Gemma 3's embedding module scales its rows inside, before
			// the reduction; the other families' forwards scale after.
			inside := k.Scale && tp.scaleInside
			e := &VocabEmbedding{Vocab: ceilDiv(k.Vocab, tp.t), Whole: k.Vocab, Dim: k.Dim, Name: k.Name, Tied: tp.tied, Scale: inside}
			out = append(out, L(e), tp.out())
			if k.Scale && !inside {
				out = append(out, L(&Rescale{}))
			}
		case *Attention:
			a := *k
			a.Heads, a.KVHeads = k.Heads/tp.t, k.KVHeads/tp.t
			if a.HeadDim == 0 {
				a.HeadDim = k.Dim / k.Heads
			}
			if k.QKNormWhole {
				a.QKNormRanks = tp.t // OLMo 2's norms, OLMo-core's plan
			}
			// StarCoder2's residual dropout on the output projection's
			// result: after RowwiseParallel's reduction, on what it left,
			// inside the attention's call.
			a.OutDropout = 0
			out = append(out, closeWith(tp.module(L(&a)), k.OutDropout)...)
		case *GatedMLP:
			g := *k
			g.Hidden = k.Hidden / tp.t
			out = append(out, tp.module(L(&g))...)
		case *MoE:
			if tp.ep {
				// With expert parallelism torchtitan's plan keeps the
				// block's tokens sharded along the sequence (sequence
				// parallelism, which CheckEP requires): each tp rank
				// routes its shard and the all-to-all runs over the EP
				// group (docs/moe.md §8). No collective of the tp group.
				out = append(out, l)
				continue
			}
			// torchtitan's plan for experts without EP: the block's input
			// gathered (or wrapped) to Replicate, the router replicated on
			// every token, each expert's gate/up columns and down rows
			// split (Shard(1) and Shard(2) of the [E, ·, ·] weights), the
			// shared expert column- and row-wise, and the partial output
			// reduced as RowwiseParallel's.
			if k.Hidden%tp.t != 0 || k.Shared%tp.t != 0 {
				return nil, fmt.Errorf("tensor parallelism: the experts' intermediate size %d (shared %d) does not split over %d ranks", k.Hidden, k.Shared, tp.t)
			}
			x := *k
			x.Hidden, x.Shared = k.Hidden/tp.t, k.Shared/tp.t
			out = append(out, tp.module(L(&x))...)
		case *RMSNorm, *LayerNorm:
			out = append(out, l) // SequenceParallel, or replicated
		case *LMHead:
			if k.Bias {
				return nil, fmt.Errorf("%w: a head with a bias", ErrNotSplittable)
			}
			out = append(out, tp.in(), L(&VocabHead{Vocab: ceilDiv(k.Vocab, tp.t), Dim: k.Dim, Ranks: tp.t, Tie: k.Tie, Gather: !tp.lp,
				Softcap: k.Softcap, Scale: k.Scale}))
		default:
			return nil, fmt.Errorf("%w: %s", ErrNotSplittable, l.Kind)
		}
	}
	return out, nil
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

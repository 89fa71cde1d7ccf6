package model

import "fmt"

// One rank's program under tensor parallelism: tpLowering splits a model's
// layers as torchtitan's apply_tp (and bench/torch/dist/hftp.py, for the
// families run through transformers' forward) splits their modules, with
// DTensor's collectives between them (docs/parallelism.md §3.1).

type tpLowering struct {
	t            int64
	sp, lp, tied bool
	// scaleInside: the embedding module scales its rows (Gemma's).
	scaleInside bool
	// ep: the experts are split over ranks (expert parallelism), not by
	// columns: each tp rank routes its own sequence shard.
	ep bool
}

func (tp *tpLowering) coll(op string) Layer { return L(&Collective{Op: op, Ranks: tp.t}) }

// in is what enters a ColwiseParallel module: the sequence gathered, or a
// replicated input wrapped, by each of its column-parallel products when
// each is set (Collective.Each).
func (tp *tpLowering) in(each bool) Layer {
	op := OpReplicate
	if tp.sp {
		op = OpGatherSeq
	}
	l := tp.coll(op)
	l.Spec.(*Collective).Each = each
	return l
}

// out is what leaves a RowwiseParallel module: the partial sum reduced.
func (tp *tpLowering) out() Layer {
	if tp.sp {
		return tp.coll(OpReduceScatterSeq)
	}
	return tp.coll(OpAllReduce)
}

// module is body, the layers of one module (the attention, an MLP, a
// mixture of experts), between its collectives: in(each), body, out(), the
// first opening the module's call and the last closing it
// (Collective.Opens). each says that the module's column-parallel
// products wrap its replicated input one by one (Collective.Each): the
// attention's projections and an MLP's, as ColwiseParallel does on each;
// not a mixture of experts' wrapper or latent attention, whose inputs are
// wrapped once (TPMoE, ExpertsTP) or reach replicated down-projections.
func (tp *tpLowering) module(each bool, body ...Layer) []Layer {
	in, out := tp.in(each), tp.out()
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
	return tp.module(true, L(&u), ls[i+1], L(&d)), true
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
		switch l.Spec.(type) {
		case *Repeat, *Residual, *Block, *Fork:
			c, err := tp.container(l)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
			continue
		}
		ll, skip, err := tp.leaf(ls, i)
		if err != nil {
			return nil, err
		}
		out = append(out, ll...)
		i += skip
	}
	return out, nil
}

// container lowers a layer that holds others: its body, or each branch of
// a fork (Cohere's parallel block: each branch a module of its own, with
// its own collectives; hftp.py gathers the norm's output for each).
func (tp *tpLowering) container(l Layer) (Layer, error) {
	c := l
	if _, ok := l.Spec.(*Fork); !ok {
		body, err := tp.layers(l.Body)
		c.Body = body
		return c, err
	}
	c.Branches = make([][]Layer, len(l.Branches))
	for j, b := range l.Branches {
		body, err := tp.layers(b)
		if err != nil {
			return c, err
		}
		c.Branches[j] = body
	}
	return c, nil
}

// leaf lowers ls[i], a layer that holds none, to one rank's layers; skip
// is how many of the layers after it the lowering took with it (a plain
// MLP's activation, second linear and dropout).
func (tp *tpLowering) leaf(ls []Layer, i int) (out []Layer, skip int, err error) {
	l := ls[i]
	switch k := l.Spec.(type) {
	case *Linear:
		mlp, ok := tp.plainMLP(ls, i)
		if !ok {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotSplittable, l.Kind)
		}
		skip = 2
		if i+3 < len(ls) {
			if d, ok := ls[i+3].Spec.(*Dropout); ok {
				// Starcoder2MLP's residual dropout, inside the module.
				mlp = closeWith(mlp, d.P)
				skip++
			}
		}
		out = append(out, mlp...)
	case *Dropout, *Activation, *Rescale:
		// On the residual stream (the embeddings', a branch's output
		// after its reduction, a later pipeline stage's input:
		// Model.stageInput): the rank's sequence shard, or whole.
		out = append(out, l)
	case *Embedding:
		// Gemma's embedding module scales its rows inside, before the
		// reduction (transformers 5.4 on; Gemma 3's always); Granite's
		// forward scales after.
		inside := k.Scale && tp.scaleInside
		e := &VocabEmbedding{Vocab: ceilDiv(k.Vocab, tp.t), Whole: k.Vocab, Dim: k.Dim, Name: k.Name, Tied: tp.tied, Scale: inside}
		red := tp.out()
		// inputs_embeds is the reduction's output, or its product
		// (Embedding.Hold).
		after := k.Scale && !inside
		red.Spec.(*Collective).Holds = k.Hold && !after
		out = append(out, L(e), red)
		if after {
			out = append(out, L(&Rescale{Hold: k.Hold}))
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
		out = append(out, closeWith(tp.module(k.MLA == nil, L(&a)), k.OutDropout)...)
	case *GatedMLP:
		g := *k
		g.Hidden = k.Hidden / tp.t
		out = append(out, tp.module(true, L(&g))...)
	case *MoE:
		return tp.moe(k, l)
	case *RMSNorm, *LayerNorm:
		out = append(out, l) // SequenceParallel, or replicated
	case *LMHead:
		if k.Bias {
			return nil, 0, fmt.Errorf("%w: a head with a bias", ErrNotSplittable)
		}
		// The head's input collective opens its module's call, which holds
		// the gathered input until it returns, after the logits' gather
		// and before the loss (vocabHeadOp).
		in := tp.in(false)
		in.Spec.(*Collective).Opens = true
		out = append(out, in, L(&VocabHead{Vocab: ceilDiv(k.Vocab, tp.t), Dim: k.Dim, Ranks: tp.t, Tie: k.Tie, Gather: !tp.lp,
			Uneven: k.Vocab%tp.t != 0, Softcap: k.Softcap, Scale: k.Scale}))
	default:
		return nil, 0, fmt.Errorf("%w: %s", ErrNotSplittable, l.Kind)
	}
	return out, skip, nil
}

// moe lowers a mixture of experts l (k its spec) to one rank's layers.
func (tp *tpLowering) moe(k *MoE, l Layer) ([]Layer, int, error) {
	if tp.ep {
		// With expert parallelism torchtitan's plan keeps the
		// block's tokens sharded along the sequence (sequence
		// parallelism, which CheckEP requires): each tp rank
		// routes its shard and the all-to-all runs over the EP
		// group (docs/moe.md §8). No collective of the tp group.
		return []Layer{l}, 0, nil
	}
	// torchtitan's plan for experts without EP: the block's input
	// gathered (or wrapped) to Replicate, the router replicated on
	// every token, each expert's gate/up columns and down rows
	// split (Shard(1) and Shard(2) of the [E, ·, ·] weights), the
	// shared expert column- and row-wise, and the partial output
	// reduced as RowwiseParallel's.
	if k.Hidden%tp.t != 0 || k.Shared%tp.t != 0 {
		return nil, 0, fmt.Errorf("tensor parallelism: the experts' intermediate size %d (shared %d) does not split over %d ranks", k.Hidden, k.Shared, tp.t)
	}
	x := *k
	x.Hidden, x.Shared = k.Hidden/tp.t, k.Shared/tp.t
	return tp.module(false, L(&x)), 0, nil
}

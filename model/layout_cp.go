package model

import "fmt"

// Context parallelism (docs/parallelism.md §3.3): the lowering of a Llama
// model to one rank of torch.distributed.tensor.experimental's
// context_parallel. Every layer runs on the rank's s/c tokens (the
// estimator simulates the rank's program at that sequence length); the
// attention layers become ring attention, which exchanges the keys and
// values of the whole sequence.

// KRingAttention is the layer kind of a context-parallel attention layer
// (not accepted in specs: only lowerings make it).
const KRingAttention = "ring_attention"

// RingAttention is an attention layer under context parallelism over
// Ranks ranks: its projections, rotary embeddings and output projection
// run on the rank's tokens, and the attention kernel runs ring attention
// with the default all-gather rotation of the keys and values. HF says the
// module is transformers' own (Model.RunsTransformersForward): everything
// but the kernel is its attention's, whose SDPA call passes enable_gqa, so
// the ring takes the key/value heads as they are; torchtitan's (cp.py's
// Llama) repeats them first.
type RingAttention struct {
	Attention
	Ranks int64
	HF    bool
}

// Kind is the layer kind's name.
func (*RingAttention) Kind() string { return KRingAttention }

// lowerCP replaces each attention layer of ls by ring attention over cp
// ranks; hf says the layers are transformers' own modules
// (RingAttention.HF), whose other kinds (norms, dropouts, scales, a
// parallel block's branches) work token by token as well.
func lowerCP(ls []Layer, cp int64, hf bool) ([]Layer, error) {
	out := make([]Layer, 0, len(ls))
	for _, l := range ls {
		switch k := l.Spec.(type) {
		case *Repeat, *Residual, *Block:
			body, err := lowerCP(l.Body, cp, hf)
			if err != nil {
				return nil, err
			}
			c := l
			c.Body = body
			out = append(out, c)
		case *Fork:
			c := l
			c.Branches = make([][]Layer, len(l.Branches))
			for j, b := range l.Branches {
				body, err := lowerCP(b, cp, hf)
				if err != nil {
					return nil, err
				}
				c.Branches[j] = body
			}
			out = append(out, c)
		case *Attention:
			a := *k
			if a.HeadDim == 0 {
				a.HeadDim = k.Dim / k.Heads
			}
			out = append(out, L(&RingAttention{Attention: a, Ranks: cp, HF: hf}))
		case *Embedding, *GatedMLP, *MoE, *RMSNorm, *LMHead, *Collective, *VocabEmbedding, *VocabHead:
			// Token by token: each rank runs them on its own tokens (a
			// mixture of experts routes them, with expert parallelism
			// over its group).
			out = append(out, l)
		case *LayerNorm, *Dropout, *Rescale, *Linear, *Activation:
			if !hf {
				return nil, fmt.Errorf("%w: %s under context parallelism", ErrNotSplittable, l.Kind)
			}
			out = append(out, l) // token by token too
		default:
			return nil, fmt.Errorf("%w: %s under context parallelism", ErrNotSplittable, l.Kind)
		}
	}
	return out, nil
}

// checkCP refuses the data-parallel setups context parallelism is not
// simulated with (docs/parallelism.md §3.3): torchtitan shards over dp·cp
// with FSDP, so DDP over dp and ZeRO 1 are left out; and, once the command
// line's sizes are in, what m's program refuses beside it
// (Model.SeqSplitRefusal: the transformers-run families, without PP).
func checkCP(e *errs, t *Training, m *Model, tm *mapping, o Overrides) {
	if t.CP <= 1 {
		return
	}
	line := lineOf(tm, "cp")
	if o.CP > 0 {
		line = 0 // from the command line
	}
	if why := m.SeqSplitRefusal(t); why != "" {
		e.add(line, "cp: %s", why)
		return
	}
	if t.Zero == 1 || (t.DP > 1 && t.Zero == 0) {
		e.add(line, "cp: context parallelism with dp %d at ZeRO stage %d is not simulated (torchtitan shards over dp·cp with FSDP: use zero 3)", max(t.DP, 1), t.Zero)
	}
}

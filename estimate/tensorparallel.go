package estimate

import (
	"fmt"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// Tensor and sequence parallelism (docs/parallelism.md §3.1). The layout is
// lowered to one rank's program by model.LowerRank: the rank's shares of
// the matrices, and DTensor's collectives as layers of their own. This file
// simulates those collectives and the vocabulary-parallel head; every other
// layer runs through its usual simulation, on the shapes the rank sees.
//
// DTensor's functional collectives allocate their outputs on the current
// stream, so they come from the default stream's pool. A gather along a
// dimension other than 0 gathers into a [t·b, …] buffer and concatenates
// the chunks (funcol.all_gather_tensor); a reduce-scatter along one first
// concatenates the chunks into a dimension-0 layout
// (funcol.reduce_scatter_tensor): both hold two full-size tensors for a
// moment.

func init() {
	register(model.KCollective, func(_ *sim, l *model.Layer, _ map[string]*tensor) op {
		return collectiveOp{l.Spec.(*model.Collective)}
	})
	register(model.KRescale, func(_ *sim, l *model.Layer, _ map[string]*tensor) op {
		return rescaleOp{l.Spec.(*model.Rescale).Hold}
	})
	register(model.KSoftcap, func(*sim, *model.Layer, map[string]*tensor) op { return softcapOp{} })
	register(model.KVocabHead, func(s *sim, l *model.Layer, names map[string]*tensor) op {
		k := l.Spec.(*model.VocabHead)
		w := names[k.Tie]
		if k.Tie == "" || w == nil {
			w = s.matrix(k.Vocab, k.Dim, 1, "output.weight (vocabulary shard)")
		} else if s.metaTP {
			// Built on the meta device and tied: to_empty visits the
			// shared parameter once per module that holds it, and each
			// visit gives it a fresh storage, freeing the one before
			// (Module._apply's set_data), so the embedding's first
			// storage is left a cached block when the head's turn
			// comes (measured: gemma-3-27b-6layer at tp 2, a 2,690 MiB
			// segment mapped at to_empty after the blocks' weights;
			// bench/results/2026-11-27-h100x4-tp-gemma3).
			s.reallocate(w)
		}
		return &vocabHeadOp{k, w}
	})
}

func init() {
	register(model.KVocabEmbedding, func(s *sim, l *model.Layer, names map[string]*tensor) op {
		k := l.Spec.(*model.VocabEmbedding)
		o := &vocabEmbeddingOp{k: k, w: s.matrix(k.Vocab, k.Dim, 1, "embedding.weight (vocabulary shard)")}
		if k.Name != "" {
			names[k.Name] = o.w
		}
		if k.Tied && s.tiedWhole != nil {
			// Loaded whole and tied (loadWhole): torchtitan's plan
			// distributes the embedding and the head before the blocks,
			// each module its own shard of the tied weight; the whole
			// weight goes once both have replaced it, the head's shard
			// when the script ties the two again (measured on 4 x H200:
			// bench/results/2026-11-26-h200x4-tp4-segments.txt).
			s.untied = append(s.untied, s.alloc(o.w.elems, o.w.dt, catParam, "output.weight (vocabulary shard, untied)"))
			s.unref(s.tiedWhole)
			s.tiedWhole = nil
		}
		if !k.Tied && s.cfg.zero < 2 {
			o.whole = &tensor{elems: k.Whole * k.Dim, dt: o.w.dt, refs: 1, param: true, req: true,
				fixed: catGrad, cat: catGrad, name: "embedding.weight (whole gradient)"}
			s.wholeGrads = append(s.wholeGrads, wholeGrad{o.whole, o.w.elems})
		}
		return o
	})
}

// vocabEmbeddingOp is RowwiseParallel's embedding (the ids masked to the
// rank's rows, which DTensor's _MaskPartial does with [b, s] temporaries
// left out here). Its weight's gradient is computed whole, [V, h], as a
// replicated tensor (measured on 2 x H200: 1002 MiB for Llama-3.2-1B,
// 2004 MiB for Llama-3-8B, in backward). Tied to the head, whose shard
// gradient exists by then, it is cut to the rank's shard (a clone) and
// added: a transient whole gradient. Untied, AccumulateGrad keeps the whole
// gradient as .grad until zero_grad, and each foreach op of the optimizer
// that reads it redistributes it to the shard (shardWholeGrads).
type vocabEmbeddingOp struct {
	k     *model.VocabEmbedding
	w     *tensor
	whole *tensor // untied: the holder of the whole gradient
}

// wholeGrad is a whole gradient's holder and the elements of the shard it
// belongs to.
type wholeGrad struct {
	whole *tensor
	shard int64
}

func (o *vocabEmbeddingOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	rows := s.cfg.batch * sh[0]
	y := s.alloc(rows*o.k.Dim, o.w.dt, catTemp, "embedding")
	in := o.w
	if o.whole != nil {
		in = o.whole
	}
	if n := s.record("Embedding", []*tensor{in}, y); n != nil {
		s.save(n, x)
		// embedding_dense_backward's sort of the ids: a few int64 arrays.
		n.bwdTemp = 4 * rows * i64
		if o.whole == nil {
			n.bwdTemp, n.reduceTemp = o.k.Whole*o.k.Dim*o.w.dt, n.bwdTemp
			n.tempHeld = o.k.Tied
		} else if rows > embeddingDirectRows {
			// The whole gradient allocated, embedding_backward_cuda_kernel's
			// partial segments, as for any embedding (embedding; measured:
			// 35.2 MiB after Llama 4's test shape's 250 MiB whole gradient at
			// 4,096 rows, bench/results/2026-11-28-h200x2-trace-74, trace74b).
			n.gradWS = s.workspaces([3]inputWS{{t: in, bytes: (rows + rows/10) * o.k.Dim * f32}})
		}
	}
	if o.k.Scale {
		// Gemma 3's embedding module scales its rows (VocabEmbedding.Scale).
		return s.rescale(y)
	}
	return y
}

// shardWholeGrads replays the optimizer's redistributions of the whole
// gradients (Replicate → Shard(0), a clone of the shard): one for
// _foreach_lerp_(exp_avgs, grads), then two at once for
// _foreach_addcmul_(exp_avg_sqs, grads, grads) (measured:
// TinyLlama-1.1B, adam.py lines 705 and 722).
func (s *sim) shardWholeGrads() {
	for _, g := range s.wholeGrads {
		if g.whole.pgrad == nil {
			continue
		}
		dt := g.whole.dt
		c := s.alloc(g.shard, dt, catTemp, "gradient shard (redistributed)")
		s.unref(c)
		a := s.alloc(g.shard, dt, catTemp, "gradient shard (redistributed)")
		b := s.alloc(g.shard, dt, catTemp, "gradient shard (redistributed)")
		s.unref(b)
		s.unref(a)
	}
}

// markPlain marks the parameters ps of layer l (its op o) that a
// tensor-parallel rank holds as plain tensors rather than DTensors:
// without sequence parallelism torchtitan's plan leaves the norms alone;
// the harnesses replace a mixture of experts' weights by the rank's local
// shards and keep its router replicated (bench/torch/dist's common.TPMoE,
// hftp.ExpertsTP and ep.py); GPT-OSS's sinks are cut to the rank's heads
// and per-head q/k norms kept whole, both plain, as are latent
// attention's down-projections and their norms (hftp.py leaves them
// whole). foreach AdamW cannot mix the two kinds in one call, so they are
// stepped as a parameter group of their own (adamStep).
func (s *sim) markPlain(l *model.Layer, o op, ps []*tensor) {
	mark := func(ps ...*tensor) {
		for _, p := range ps {
			if p != nil {
				p.plain = true
			}
		}
	}
	switch l.Spec.(type) {
	case *model.MoE:
		mark(ps...)
	case *model.RMSNorm, *model.LayerNorm:
		if !s.tpSP {
			mark(ps...)
		}
	case *model.Attention:
		if a, ok := o.(*attnOp); ok {
			mark(a.sinks)
			if a.k.QKNormRanks <= 1 {
				// OLMo 2's whole-width norms are SequenceParallel's
				// replicated DTensors under OLMo-core's plan.
				mark(a.qNorm, a.kNorm)
			}
			if m := a.mla; m != nil {
				// The latent down-projections and their norms, replicated.
				mark(m.qa, m.qaB, m.qaNorm, m.kva, m.kvaB, m.kvNorm)
			}
		}
	}
}

// dtStream says whether the residual stream is a DTensor: sequence
// parallelism of a model run through transformers' own forward, whose
// residual stream hftp.py keeps as Shard(1) DTensors (sim.wholeSeq), so
// that the residual adds' outputs, the modules' reduce-scattered outputs
// and the norms' rows have their gradients summed out of place
// (tensor.dtAct), and a module takes its gathered input local, wrapped
// again by each projection (collectiveOp.run). torchtitan's plan keeps the
// stream local: there only a norm's rows (seqParallelInput) and the
// gathered module input are DTensors.
func (s *sim) dtStream() bool { return s.wholeSeq > 1 }

// seqParallelInput is SequenceParallel's input hook on a norm under
// sequence parallelism: DTensor.from_local(x, [Shard(1)]), a view of x.
// The norm runs on the DTensor, so the gradients its ops hand back to
// its input are a DTensor's, summed out of place (tensor.dtAct), and the
// view's backward passes the sum to x, where it is added to the residual
// stream's gradient (measured: held-out set 64's last stage, which keeps
// the product's share of the input's gradient until the power's share
// exists, sums them into a new tensor and frees all three,
// bench/results/2026-11-28-h200x4-pp64-history; docs/parallelism.md
// §3.1.9).
func (s *sim) seqParallelInput(x *tensor) *tensor {
	y := s.view(x, x.elems)
	y.dtAct, y.perm, y.name = true, x.perm, x.name
	if n := s.record("FromLocal", []*tensor{x}, y); n != nil {
		n.pass = true
	}
	return y
}

// releaseWholeGrads frees the whole gradients, as zero_grad(set_to_none)
// does.
func (s *sim) releaseWholeGrads() {
	for _, g := range s.wholeGrads {
		s.unref(g.whole.pgrad)
		g.whole.pgrad = nil
	}
}

type vocabHeadOp struct {
	k *model.VocabHead
	w *tensor
}

// forward is ColwiseParallel's head and the loss of bench/torch/dist's
// training step (F.cross_entropy(logits.float()), after the loop has left
// autocast: loss_outside_autocast): the logits of the
// rank's vocabulary shard, all-gathered (output_layouts=Replicate) unless
// the loss is parallel. loss_parallel's log-softmax
// (torch/distributed/tensor/parallel/loss.py, _log_softmax) keeps the
// shifted logits x − max alive beside its exp and its result.
func (o *vocabHeadOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	k := o.k
	rows := s.rows(sh)
	// The head runs after the base model's forward has returned, and the
	// script keeps only its hidden states (pp.HFStage's
	// .last_hidden_state, torchtitan's h): that forward's locals go, and
	// with its output the key/value cache transformers filled (measured:
	// Phi-3 at tp 2, whose cache copies are freed before the head,
	// bench/results/2026-11-27-h200x2-tp-families).
	s.dropBodyHold()
	s.dropKVHold()
	logits := s.matmul(x, o.w, nil, rows, k.Vocab)
	if k.Gather {
		var pad *tensor
		if k.Uneven {
			// The last rank's smaller shard, padded to the others' rows
			// for the all-gather (F.pad in DTensor's redistribute), freed
			// once the gathered logits are concatenated (measured:
			// Granite's 49,155 rows at tp 2, rank 1's allocator history,
			// bench/results/2026-11-28-h200x4-cp-tp-families-trace).
			pad = s.alloc(logits.elems, logits.dt, catTemp, "padded vocabulary shard (TP)")
			s.note(fmt.Sprintf("tensor parallelism: the vocabulary does not divide over the %d tp ranks; the last rank's shard is smaller and DTensor pads its logits to %d columns for their all-gather, a copy the other ranks do not make: the figures are that rank's (docs/parallelism.md §3.3.2)",
				k.Ranks, k.Vocab))
		}
		full := s.allGather(logits, k.Ranks, false, false)
		if pad != nil {
			s.unref(pad)
		}
		s.unref(logits)
		logits = full
	}
	// The head module returns: its call drops the gathered input; the
	// base model's output (the norm's, which the causal LM's forward or
	// torchtitan's h holds) goes as the model returns, after what the
	// causal LM's forward does to the logits and before the loss
	// (measured: the tiny MoE at tp 2 with sequence parallelism, whose
	// history frees the 16 MiB gathered input and then the 8 MiB norm
	// output after the logits' all-gather, before loss_fn's cast;
	// bench/results/2026-11-28-h200x2-tp-moe-52-trace).
	s.unref(x)
	s.dropGathered()
	if k.Softcap > 0 {
		logits = s.softcap(logits) // Gemma 2's, as its CausalLM forward applies it
	}
	if k.Scale {
		logits = s.rescale(logits) // logits / logits_scaling (Granite)
	}
	s.closeModule() // the model returns: its output
	if k.Output {
		return logits // a pipeline's last stage: the schedule runs the loss
	}
	s.lossAfterAutocast()
	src := s.to(logits, f32)
	var loss *tensor
	if k.Gather {
		loss = s.crossEntropy(src, rows)
	} else {
		loss = s.parallelCrossEntropy(src)
	}
	s.unref(src)
	s.unref(logits)
	return loss
}

// takesInput: the head module's call drops its input before the loss
// (forward).
func (*vocabHeadOp) takesInput() bool { return true }

// rescaleOp is model.Rescale: x times a constant, a new tensor (the
// caller drops x), held until the base model returns with hold.
type rescaleOp struct{ hold bool }

func (o rescaleOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	y := s.scalarOp(x)
	if o.hold {
		s.bodyHold = append(s.bodyHold, s.ref(y)) // dropBodyHold
	}
	return y
}

// softcapOp is model.Softcap: cap·tanh(x/cap), three new tensors of x's
// size (sim.softcap). It takes over the caller's hold on x (takesInput):
// the causal LM rebinds its logits to each result (logits = logits / cap),
// so x goes once the division is made, and the division's result once
// tanh's is (measured: Gemma 2's last pipeline stage, whose shape
// inference maps two logits-sized segments for the softcap, not three;
// bench/results/2026-11-28-h100x4-pp-families-traces).
type softcapOp struct{}

func (softcapOp) takesInput() bool { return true }

func (softcapOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	return s.softcap(x)
}

// parallelCrossEntropy is F.cross_entropy under loss_parallel on the
// rank's vocabulary shard x (torch/distributed/tensor/parallel/loss.py).
// _log_softmax keeps the shifted logits x − max alive beside exp(shifted),
// then beside the result, which its node saves. The backward is fused
// into the NLL loss's (_nll_loss_and_log_softmax_backward):
// (grad_input + exp(x)) · grad_output with grad_input a zeros_like(x),
// made in that order, exp(x) freed once the sum exists and the sum once
// the product does, then grad_input: three shard-sized tensors beside the
// saved result, each its own block (measured on 4 × H200:
// bench/results/2026-11-26-h200x4-tp4ckpt-trace.jsonl's loss-parallel
// line). The log-softmax's own backward returns its gradient unchanged.
func (s *sim) parallelCrossEntropy(x *tensor) *tensor {
	shifted := s.alloc(x.elems, f32, catTemp, "shifted logits (loss parallel)")
	e := s.alloc(x.elems, f32, catTemp, "exp (loss parallel)")
	s.unref(e)
	lp := s.alloc(x.elems, f32, catTemp, "log-softmax (loss parallel)")
	s.unref(shifted)
	if n := s.record("LogSoftmax", []*tensor{x}, lp); n != nil {
		n.pass = true
		s.save(n, lp)
	}
	loss := s.alloc(1, f32, catTemp, "loss")
	if n := s.record("NllLossParallel", []*tensor{lp}, loss); n != nil {
		s.save(n, lp)
		n.bwdTemp = lp.bytes()                          // grad_input
		n.pairTemps, n.pairFirstDies = lp.bytes(), true // exp(x), the sum
	}
	s.unref(lp)
	return loss
}

// loadWhole replays how bench/torch/dist/tp.py (and any script that builds
// the model on the GPU before parallelize_module) loads a tensor-parallel
// model: every parameter is first allocated whole, then parallelize_module
// allocates each shard and frees the whole tensor it replaces. The freed
// blocks stay cached and the step reuses them (measured: Llama-3-8B's
// 224 MiB whole MLP weights stay reserved as 96 segments,
// docs/parallelism.md §3.1). With FSDP over dp, fully_shard then does the
// same with the tensor-parallel shards and its dp shards. It allocates the
// whole parameters now and returns the function to call once the rank's
// parameters are built; each parameter the build allocates frees the next
// whole one. A weight tied to two modules is replaced twice: the whole
// model's head allocates its own weight before tying (kinds_embed.go), and
// the rank's embedding and head each get a shard before the whole goes
// (vocabEmbeddingOp's registration). t is the run: the scatter's source
// sends to its tp-1 other tensor-parallel ranks.
func (s *sim) loadWhole(whole, prog []model.Layer, t model.Training) (done func()) {
	tp := t.TP
	build := func(ls []model.Layer) []*tensor {
		zero := s.cfg.zero
		s.cfg.zero = 0
		defer func() { s.cfg.zero = zero }()
		start := len(s.params)
		s.build(ls, map[string]*tensor{})
		out := append([]*tensor(nil), s.params[start:]...)
		s.params = s.params[:start]
		return out
	}
	finish := func() {
		for _, p := range s.unreplaced {
			s.unref(p)
		}
		s.unreplaced = nil
		for _, p := range s.untied {
			s.unref(p)
		}
		s.untied = nil
	}
	s.wholeBuild = true
	s.unreplaced = build(whole)
	s.wholeBuild = false
	source, recv := scatterNCCL(parallel.H200x2Defaults, tp)
	if scatterShared(t) {
		source = recv // the all-to-all's connections carry the scatter
	}
	if diff := recv - source; diff > 0 {
		s.note(fmt.Sprintf("ranks differ: the figures are a receiving rank's; rank 0 scatters the parameters and its NCCL buffers take %s less (docs/parallelism.md §3.5)", units.Format(diff)))
	} else if diff < 0 {
		s.note(fmt.Sprintf("ranks differ: the figures are rank 0's, which scatters the parameters to the others; its NCCL buffers take %s more than a receiving rank's (docs/parallelism.md §3.5)", units.Format(-diff)))
	}
	if s.cfg.zero >= 2 {
		// fully_shard replaces the tensor-parallel shards in turn.
		local := build(prog)
		finish()
		s.unreplaced = local
	}
	return finish
}

// replaceWhole frees the next whole parameter of a load once the
// parameter that replaces it is allocated.
func (s *sim) replaceWhole() {
	if len(s.unreplaced) > 0 {
		p := s.unreplaced[0]
		s.unreplaced = s.unreplaced[1:]
		s.unref(p)
	}
}

package estimate

import (
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
	register(model.KVocabHead, func(s *sim, l *model.Layer, names map[string]*tensor) op {
		k := l.Spec.(*model.VocabHead)
		w := names[k.Tie]
		if k.Tie == "" || w == nil {
			w = s.matrix(k.Vocab, k.Dim, 1, "output.weight (vocabulary shard)")
		}
		return &vocabHeadOp{k, w}
	})
}

type collectiveOp struct{ k *model.Collective }

func (o collectiveOp) forward(s *sim, x *tensor, _, _ model.Shape) *tensor {
	t := o.k.Ranks
	switch o.k.Op {
	case model.OpGatherSeq:
		return s.allGather(x, t, true)
	case model.OpReduceScatterSeq:
		// Partial → Shard(1): the chunks concatenated along dim 0, then
		// reduce_scatter_tensor's output. Backward all-gathers the
		// gradient: a [t·b, s/t, …] buffer, then the full gradient.
		c := s.alloc(x.elems, x.dt, catTemp, "reduce-scatter input (TP)")
		y := s.alloc(x.elems/t, x.dt, catTemp, "reduce-scatter output (TP)")
		s.unref(c)
		if n := s.record("ReduceScatter", []*tensor{x}, y); n != nil {
			n.bwdTemp = x.bytes()
		}
		return y
	case model.OpAllReduce:
		// Partial → Replicate: funcol.all_reduce clones, then reduces in
		// place. Backward is Replicate → Replicate: the gradient passes.
		y := s.alloc(x.elems, x.dt, catTemp, "all-reduce output (TP)")
		if n := s.record("AllReduce", []*tensor{x}, y); n != nil {
			n.pass = true
		}
		return y
	}
	// OpReplicate: DTensor.from_local in forward; in backward the
	// gradient is a partial sum, all-reduced into a new tensor.
	y := s.view(x, x.elems)
	s.record("FromLocal", []*tensor{x}, y)
	return y
}

// allGather gathers t shards of x into a new tensor. seq says whether the
// gradient is a partial sum to reduce-scatter in backward (a sequence
// gather before ColwiseParallel), which concatenates the gradient's
// chunks first; a gather of the logits' vocabulary shards instead takes
// its shard of the replicated gradient (a clone).
func (s *sim) allGather(x *tensor, t int64, seq bool) *tensor {
	buf := s.alloc(x.elems*t, x.dt, catTemp, "all-gather output (TP)")
	y := s.alloc(x.elems*t, x.dt, catTemp, "all-gather concatenation (TP)")
	s.unref(buf)
	if n := s.record("AllGather", []*tensor{x}, y); n != nil && seq {
		n.bwdTemp = y.bytes()
	}
	return y
}

type vocabHeadOp struct {
	k *model.VocabHead
	w *tensor
}

// forward is ColwiseParallel's head and the loss of bench/torch/dist's
// training step (F.cross_entropy(logits.float())): the logits of the
// rank's vocabulary shard, all-gathered (output_layouts=Replicate) unless
// the loss is parallel. loss_parallel's log-softmax
// (torch/distributed/tensor/parallel/loss.py, _log_softmax) keeps the
// shifted logits x − max alive beside its exp and its result.
func (o *vocabHeadOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	k := o.k
	rows := s.rows(sh)
	logits := s.matmul(x, o.w, nil, rows, k.Vocab)
	if k.Gather {
		full := s.allGather(logits, k.Ranks, false)
		s.unref(logits)
		logits = full
	}
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

// parallelCrossEntropy is F.cross_entropy under loss_parallel on the
// rank's vocabulary shard x (torch/distributed/tensor/parallel/loss.py).
// _log_softmax keeps the shifted logits x − max alive beside exp(shifted),
// then beside the result, which its node saves. The backward is fused
// into the NLL loss's (_nll_loss_and_log_softmax_backward):
// (grad_input + exp(x)) · grad_output with grad_input a zeros_like(x), so
// three shard-sized tensors beside the saved result; the log-softmax's own
// backward returns its gradient unchanged.
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
		n.bwdTemp = 2 * lp.bytes()
	}
	s.unref(lp)
	return loss
}

// communicators is the number of NCCL communicators a rank's process
// groups use: one per parallel dimension larger than one
// (docs/parallelism.md §3.5).
func communicators(t model.Training) int {
	n := 0
	for _, d := range []int64{t.DP, t.TP, t.CP} {
		if d > 1 {
			n++
		}
	}
	return n
}

// ncclFor is the device memory of n communicators, with the channel counts
// measured on 2 x H200 (parallel.H200x2Defaults).
func ncclFor(n int) int64 {
	c := parallel.H200x2Defaults
	c.Communicators = n
	return mustNCCL(parallel.NCCLBytes(c))
}

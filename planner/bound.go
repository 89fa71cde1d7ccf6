package planner

import (
	"fmt"
	"slices"
	"sync"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// stateBound is a lower bound of a layout's busiest rank, computed
// without the simulator (docs/planner.md §4): the model state that is live
// at once during the first optimizer step, plus the device memory outside
// PyTorch's allocator that every run has. Every term is a floor of what
// the estimator allocates:
//
//   - the rank holds at least P/(tp·pp·ep) of the P parameters: tensor
//     parallelism replicates norms and pads the vocabulary, a pipeline's
//     busiest stage holds at least the mean, an expert-parallel rank
//     keeps the dense layers whole, so the ranks together hold at least P;
//   - parameters and gradients in the parameter dtype (2 bytes in bf16 and
//     fsdp-bf16, whose fp32 shards only add, 4 otherwise), and the
//     optimizer's state: two moments for Adam and AdamW, one for SGD with
//     momentum, none counted for the others;
//   - ZeRO 1 shards the optimizer state over dp·cp (whole parameters to a
//     rank: the busiest holds at least the mean), ZeRO 2 and 3 (FSDP) also
//     the parameters and gradients, which are resharded at the step;
//   - DDP (ZeRO 0 and 1 over dp > 1) keeps gradient buckets the size of
//     the rank's parameters for the whole run; FSDP holds, from a
//     forward's start to its backward's end, every gathered parameter
//     (ZeRO 2) or the root and two blocks (ZeRO 3: counted as two Llama
//     blocks' projections, without a pipeline; a mixture of experts'
//     counted over tp·ep, the rank's E/ep experts being gathered whole);
//   - the first step creates the optimizer's state while the gradients
//     are live (estimate/step.go), so all three are held at once, with
//     Adam's foreach temporary (one moment's size) on top;
//   - in the second step, at the end of a micro-batch's forward, the
//     parameters and the optimizer's state are live (the gradients were
//     set to None) with what autograd saved: at least one tensor of the
//     block's input per transformer block (checkpointing every block
//     keeps exactly that; without checkpointing the first norm saves it
//     or its fp32 copy, and a Llama block's gated MLP saves its gate and
//     up projections and the activation, 3 · intermediate/tp per token),
//     micro · seq/cp · hidden elements (over tp with
//     sequence parallelism) of 2 bytes (4 in fp32), over the blocks of the
//     stage that has fewest, and on the last stage the log-softmax the
//     loss saves (micro · seq/cp · vocab/tp elements); a pipeline stage
//     holds at least one micro-batch, the first stage the block inputs
//     of every micro-batch in flight (min(pp, m) under 1F1B, m under
//     GPipe) and a receive buffer per micro-batch, and the last stage
//     every micro-batch's logits twice (merge_chunks) and a receive buffer
//     per micro-batch (acts; the stage's parameters are not counted there),
//     or, at its last micro-batch's loss backward, every micro-batch's
//     logits once, that micro-batch's log-softmax and its gradient, and
//     the mid-step state of all its rank's blocks (stageState);
//   - with tensor parallelism and a model built on the GPU first
//     (fsdp_init gpu) the rank first loads its parameters whole (the way
//     bench/torch/dist/tp.py builds the model before parallelize_module;
//     estimate/tensorparallel.go), P/ep of them in the parameter dtype,
//     live at once;
//   - reserved memory is at least allocated, and the device total adds
//     the CUDA context and the kernel modules (internal/measured) and the
//     NCCL communicators every rank of the layout holds at least
//     (estimate.NCCLFloor; nineteenth session).
//
// LoRA and quantized bases freeze or shrink the weights and change what
// autograd saves: there only the fixed overhead and NCCL are counted. TestStateBound checks the bound against the
// estimator over many layouts.
type stateBound struct {
	params int64 // P
	elem   int64 // bytes per parameter, gradient and moment element
	// moments is the optimizer state per parameter, in elements.
	moments int64
	// fixed is the device memory outside the allocator.
	fixed int64
	// act is the bytes of one block's input per token and hidden unit
	// (0: not counted); seq, hidden and layers the model's.
	act, seq, hidden, layers, vocab int64
	// mlp is a dense gated MLP's intermediate size (Llama), 0 otherwise.
	mlp int64
	// linear is a Llama block's projection parameters: the attention's
	// and the MLP's, or the experts' (all of them, and the shared
	// expert's) in a mixture of experts.
	linear int64
	// casts is the bytes of autocast's half copies of a Llama block's
	// projection weights (amp only; not the routed experts'), before
	// tensor parallelism.
	casts int64
	// foreach: Adam's foreach step holds one moment-sized temporary.
	foreach bool
	// bucketView: DDP's gradients are views of its buckets
	// (gradient_as_bucket_view), not a second copy.
	bucketView bool
	// wholeLoad: under tensor parallelism the model is built whole on the
	// GPU before it is split (fsdp_init gpu).
	wholeLoad bool
	// orders caches the interleaved schedule's first-rank orders.
	orders *orderCache
	// base is the spec's training, which a layout changes (applyLayout)
	// for the NCCL memory its ranks hold at least (estimate.NCCLFloor).
	base model.Training
}

func newStateBound(spec *model.Spec, params int64) stateBound {
	t := &spec.Training
	b := stateBound{params: params, elem: 4, fixed: measured.CUDAContext.Bytes + measured.ModulesBase.Bytes,
		bucketView: t.BucketView, wholeLoad: t.FSDPInit == model.FSDPInitGPU, orders: &orderCache{}, base: *t}
	if t.Precision == model.BF16 || t.Precision == model.FSDPBF16 {
		b.elem = 2
	}
	switch t.Optimizer.Name {
	case model.Adam, model.AdamW:
		b.moments = 2
		b.foreach = t.Optimizer.Impl == model.ImplForeach
	case model.SGDMomentum:
		b.moments = 1
	}
	if t.LoRA.Enabled() || t.Quant != "" {
		return stateBound{fixed: b.fixed, base: *t}
	}
	if m := &spec.Model; transformer(m) && t.Seq > 0 && m.Hidden > 0 {
		b.act, b.seq, b.hidden, b.layers, b.vocab = 2, t.Seq, m.Hidden, m.NumLayers, m.Vocab
		if t.Precision == model.FP32 {
			b.act = 4
		}
		if m.Type == model.Llama {
			hd, kv := m.HeadDim, m.KVHeads
			if hd == 0 && m.Heads > 0 {
				hd = m.Hidden / m.Heads
			}
			if kv == 0 {
				kv = m.Heads
			}
			attn := m.Hidden * hd * (2*m.Heads + 2*kv)
			// What autocast caches a half copy of: every projection
			// weight F.linear uses; the routed experts' grouped GEMMs
			// cast their input to the weights' dtype instead (docs/moe.md
			// §1).
			castable := attn + 3*m.Hidden*m.Intermediate
			if m.Experts == 0 {
				b.mlp = m.Intermediate
				b.linear = castable
			} else {
				castable = attn + 3*m.Hidden*m.SharedExpert
				b.linear = castable + m.Experts*3*m.Hidden*m.Intermediate
			}
			if t.Mixed() {
				b.casts = 2 * castable
			}
		}
	}
	return b
}

// bytes returns the bound for l and what it is: the largest of the
// model state at the step, the state and block inputs at the end of a
// forward, and the whole-model load of tensor parallelism.
func (b stateBound) bytes(l Layout) (total int64, why string) {
	n := b.params / (l.TP * l.PP * max(l.EP, 1))
	d := l.DP * l.CP
	param, grad, opt := n, n, b.moments*n
	if l.Zero >= 1 {
		opt = b.moments * n / d
	}
	if l.Zero >= 2 {
		// FSDP shards the dense parameters over dp·cp and a rank's E/ep
		// experts over the dp·cp·tp/ep ranks that hold them: P/d of the
		// stage's whatever ep (estimate/sharding.go, degree).
		s := b.params / (l.TP * l.PP) / d
		param, grad, opt = s, s, b.moments*s
	}
	tmp := int64(0)
	if b.foreach {
		tmp = opt / 2 // torch._foreach_sqrt(exp_avg_sqs), all at once
	}
	// Held for the whole run (estimate/sharding.go, shardSetup): DDP's
	// gradient buckets; from the start of a forward to the end of its
	// backward, the parameters FSDP gathers (ZeRO 2: all of them; ZeRO 3:
	// the root and two blocks, at least two blocks' projections).
	var buckets, gathered int64
	switch {
	case l.Zero <= 1 && l.DP > 1 && !b.bucketView:
		buckets = n
	case l.Zero == 2:
		gathered = n
	case l.Zero >= 3 && l.PP <= 1:
		// A mixture of experts gathers a rank's E/ep experts, split by
		// tp without EP: at least linear/(tp·ep) a block.
		gathered = 2 * b.linear / (l.TP * max(l.EP, 1))
	}
	state := (param + grad + opt + tmp + buckets) * b.elem
	total, why = state, "model state alone needs "+units.Format(state)
	switch {
	case tmp > 0 && buckets > 0:
		why = "model state, DDP's buckets and Adam's foreach step need " + units.Format(state)
	case tmp > 0:
		why = "model state and Adam's foreach step need " + units.Format(state)
	case buckets > 0:
		why = "model state and DDP's buckets need " + units.Format(state)
	}
	least, first, last := b.acts(l)
	if fwd := (param+opt+buckets+gathered)*b.elem + least; fwd > total {
		total, why = fwd, "model state and one micro-batch's activations need at least "+units.Format(fwd)
	}
	if stage := b.stageState(l, first, last); stage > total {
		total, why = stage, "a pipeline stage's state and buffers for the step's micro-batches need at least "+units.Format(stage)
	}
	// Only a model built on the GPU first (fsdp_init gpu) is loaded
	// whole; a pipeline's stages are built on the meta device
	// (estimate/estimate.go, buildRank).
	if b.wholeLoad && l.TP > 1 && l.PP <= 1 {
		if load := b.params / (l.PP * max(l.EP, 1)) * b.elem; load > total {
			total, why = load, "loading the whole model before splitting it over tp needs "+units.Format(load)
		}
	}
	total += b.fixed + b.nccl(l)
	return total, fmt.Sprintf("%s: at least %s on the device", why, units.Format(total))
}

// nccl is the NCCL memory every rank of layout l holds at least
// (estimate.NCCLFloor).
func (b stateBound) nccl(l Layout) int64 {
	t := b.base
	applyLayout(&t, l)
	return estimate.NCCLFloor(t)
}

// stageState is the larger of the first and the last pipeline stage's
// buffers (acts), each with the model state that stage holds at that
// moment (0 without a pipeline's stage terms). Its blocks' projections
// (per[k] blocks of linear/tp parameters each: a floor, the norms, the
// embedding and the head left out) are held by the rank in both steps:
//   - the first stage's buffers peak at the end of the warm-up forwards of
//     the second step (estimate/schedule.go), where the parameters, the
//     optimizer state made by the first step and DDP's buckets are live
//     (the gradients were set to None); under FSDP the pipeline gathers the
//     stage's parameters whole for the step (trainPipeline: no resharding
//     after forward), beside their shards. Under 1F1B with more
//     micro-batches than stages, the forward after the first backward has
//     as many in flight, with the gradients (whole under FSDP, reduced
//     only after the step's last backward: estimate/grads.go);
//   - the interleaved schedule's first rank's after a forward of the
//     second step, over its virtual stages (interleavedFirst);
//   - the last stage's at the step's end (merge_chunks), before the
//     optimizer step and zero_grad: the gradients are live too (under
//     FSDP reduce-scattered to shards by then, the gathered parameters
//     released).
func (b stateBound) stageState(l Layout, first, last int64) int64 {
	if first == 0 && last == 0 {
		return 0
	}
	per, err := StageLayers(b.layers, l.PP*max(l.Virtual, 1))
	if err != nil || b.linear == 0 {
		return max(first, last)
	}
	// rankBlocks is the blocks of the rank that holds virtual stage k:
	// under the interleaved schedule stages k, k+pp, k+2pp, …
	rankBlocks := func(k int64) int64 {
		if l.Schedule != Interleaved {
			return per[k]
		}
		var blocks int64
		for ; k < int64(len(per)); k += l.PP {
			blocks += per[k]
		}
		return blocks
	}
	switch {
	case first > 0 && l.Schedule == Interleaved:
		// The first rank's virtual stages, in the second step after its
		// first forward.
		first += b.blockState(l, rankBlocks(0), atWarm)
	case first > 0 && l.Schedule == OneFOneB && l.Accum > l.PP:
		// 1F1B's first stage runs a forward after its first backward
		// with pp micro-batches in flight again.
		first += b.blockState(l, per[0], atSteady)
	case first > 0:
		first += b.blockState(l, per[0], atWarm)
	}
	if last > 0 {
		blocks := rankBlocks(l.PP - 1) // the last stage's rank
		// At the last micro-batch's loss backward, before the step's end:
		// every micro-batch's logits chunk but not yet their
		// concatenation, the log-softmax the loss saved and the gradient
		// its backward makes beside it (one micro-batch's logits each, in
		// their dtype at least), with the stage's state in the middle of
		// the step (whole gradients and FSDP's gathered parameters;
		// gradients only once an earlier micro-batch's backward has made
		// them).
		at := atSteady
		if l.Accum < 2 {
			at = atWarm
		}
		// acts' last term counts every chunk twice: Accum + 2 logits here.
		mid := last - (l.Accum-2)*b.logits(l) + b.blockState(l, blocks, at)
		last = max(last+b.blockState(l, blocks, atEnd), mid)
	}
	return max(first, last)
}

// The moments of the second step blockState is taken at: after a forward
// before any backward (atWarm: no gradients, FSDP's gathered copy), after
// a forward that follows a backward (atSteady: the gradients too, whole
// under FSDP, which keeps them unreduced until the step's last backward),
// and at the step's end (atEnd: the gradients, reduce-scattered to shards
// under FSDP, whose gathered copy is released by then).
const (
	atWarm = iota
	atSteady
	atEnd
)

// blockState is the model state of a stage's blocks (their projections,
// linear/tp parameters each) at moment at.
func (b stateBound) blockState(l Layout, blocks int64, at int) int64 {
	d := l.DP * l.CP
	n := blocks * b.linear / l.TP / max(l.EP, 1)
	param, grad, opt, held := n, n, b.moments*n, int64(0)
	if l.Zero >= 1 {
		opt = b.moments * n / d
	}
	switch {
	case l.Zero >= 2:
		param, grad = n/d, n/d
		if at != atEnd {
			held = n // gathered whole for the step
		}
		if at == atSteady {
			grad = n
		}
	case l.DP > 1 && !b.bucketView:
		held = n // DDP's buckets
	}
	if at == atWarm {
		grad = 0
	}
	return (param + grad + opt + held) * b.elem
}

// logits is one micro-batch's logits on the last stage (over tp at most):
// acts' term, and each of the output chunks merge_chunks concatenates.
func (b stateBound) logits(l Layout) int64 {
	return l.Micro * (b.seq / l.CP) * (b.vocab / l.TP) * b.act
}

// acts is what one micro-batch of l leaves saved on the pipeline stage
// with the fewest blocks (its block inputs, and on the last stage the
// log-softmax of the logits), and what the first and the last stage alone
// hold with the schedule's micro-batches (estimate/pipeline.go,
// estimate/schedule.go): the first stage a gradient receive buffer per
// micro-batch and the block inputs of those in flight (1F1B: min(pp, m),
// GPipe: m), the last stage at the step's end an input receive buffer per
// micro-batch, every micro-batch's logits (output_chunks) and their
// concatenation (merge_chunks); 0 when not counted.
func (b stateBound) acts(l Layout) (least, first, last int64) {
	if b.act == 0 {
		return 0, 0, 0
	}
	tokens := l.Micro * (b.seq / l.CP)
	logits := b.logits(l)
	// A receive buffer per micro-batch, of the stage boundary: its
	// sequence shard under sequence parallelism (estimate/pipeline.go,
	// boundarySeq).
	buffers := l.Accum * tokens * b.hidden * b.act
	if l.SP {
		buffers /= l.TP
	}
	if l.PP > 1 {
		// The last stage at the step's end: its input receive buffers,
		// every micro-batch's logits and their concatenation (under the
		// interleaved schedule too: the last rank's last stage keeps its
		// output chunks, which step() merges).
		last = 2*l.Accum*logits + buffers
	}
	switch l.Checkpointing.Mode {
	case "", model.CkptNone, model.CkptBlock:
	default:
		return 0, 0, last // every-k and sqrt keep fewer segment inputs
	}
	block := tokens * b.hidden * b.act
	if l.SP {
		block /= l.TP
	}
	if l.Checkpointing.Mode != model.CkptBlock {
		// The gated MLP's gate and up projections and the activation
		// (SiLU saves its input, the product both operands), split by tp.
		block += 3 * tokens * (b.mlp / l.TP) * b.act
		if b.mlp > 0 {
			// The two RMSNorms' outputs, inputs of the q, k, v and of
			// the gate and up projections, which save them for their
			// weight gradients: the whole sequence (all-gathered under
			// sequence parallelism).
			block += 2 * tokens * b.hidden * b.act
		}
	}
	// The log-softmax the loss saves, split by vocabulary over tp at most.
	// Autocast caches its weight casts until the forward ends (with a
	// pipeline, until the step ends), once per block whatever the
	// micro-batches in flight or the checkpointing.
	casts := b.casts / l.TP
	if l.PP <= 1 {
		return b.layers*(block+casts) + logits, 0, 0
	}
	per, err := StageLayers(b.layers, l.PP*max(l.Virtual, 1))
	if err != nil {
		return 0, 0, last
	}
	least = slices.Min(per) * (block + casts)
	// The first stage: its output-gradient receive buffers and the block
	// inputs of the micro-batches in flight.
	switch l.Schedule {
	case OneFOneB:
		first = buffers + min(l.PP, l.Accum)*per[0]*block + per[0]*casts
	case GPipe:
		first = buffers + l.Accum*per[0]*block + per[0]*casts
	case Interleaved:
		out := tokens * b.hidden * b.act
		if l.SP {
			out /= l.TP
		}
		first = interleavedFirst(b.orders, l, per, block, out, casts)
	}
	return least, first, last
}

// interleavedFirst is the most the first rank of the interleaved schedule
// holds at once of three things (estimate/schedule.go, interleaved): the
// block inputs (block each) of the micro-batches in flight on each of its
// virtual stages (per[k] blocks on stage k), the stage outputs (out each)
// it has sent, every one of which the schedule keeps with its Work until
// the step's end (none of the first rank's stages is the last, so every
// forward there sends), and autocast's casts (casts a block) of the
// stages it has run a forward on, kept until the step ends. It follows the
// rank's actions in order (model.InterleavedOrder, kept in orders); 0 when the order
// cannot be made.
func interleavedFirst(orders *orderCache, l Layout, per []int64, block, out, casts int64) int64 {
	order, err := orders.first(l.PP, max(l.Virtual, 1), l.Accum)
	if err != nil {
		return 0
	}
	var held, most int64
	cast := make([]bool, len(per))
	for _, a := range order {
		if a.Stage < 0 || a.Stage >= int64(len(per)) {
			return 0
		}
		if a.Backward {
			held -= per[a.Stage] * block
			continue
		}
		held += per[a.Stage]*block + out
		if !cast[a.Stage] {
			cast[a.Stage] = true
			held += per[a.Stage] * casts
		}
		most = max(most, held)
	}
	return most
}

// orderCache keeps the interleaved schedule's order of the first rank's
// actions (model.InterleavedOrder) by pp, stages per rank and
// micro-batches, for one bound: a plan bounds thousands of interleaved
// layouts that share a few hundred orders. Orders are read-only once made;
// the map is safe for a bound shared between goroutines.
type orderCache struct{ m sync.Map } // [3]int64 → orderResult

type orderResult struct {
	order []model.PPAction
	err   error
}

func (c *orderCache) first(pp, v, m int64) ([]model.PPAction, error) {
	key := [3]int64{pp, v, m}
	if r, ok := c.m.Load(key); ok {
		return r.(orderResult).order, r.(orderResult).err
	}
	order, err := model.InterleavedOrder(0, pp, v, m)
	c.m.Store(key, orderResult{order, err})
	return order, err
}

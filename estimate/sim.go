package estimate

import "github.com/memplan/memplan/parallel"

// The simulator runs a training step symbolically: every tensor PyTorch
// would allocate is allocated here, through the caching-allocator replay,
// and freed when its last holder lets go. Holders are the Python code that
// still uses a tensor (one reference per use), autograd nodes that saved it
// for backward, autocast's weight cache, and the .grad of a parameter.
// docs/formulas.md describes the rules with their sources.

// Categories of bytes, for the breakdown at the peak.
type category uint8

const (
	catParam category = iota
	catGrad
	catOptState
	catSaved     // saved for backward
	catTemp      // everything else alive: outputs in flight, grads of activations, temporaries
	catWorkspace // cuBLAS workspaces
	catData      // the input batch
	catPipe      // pipeline parallelism's receive buffers (pipeline.go)
	numCats
)

var catNames = [numCats]string{"parameters", "gradients", "optimizer state", "activations (saved)", "temporaries", "library workspaces", "input batch", "pipeline buffers"}

// dtype sizes.
const (
	f32  = 4
	half = 2 // bf16 or fp16
	i64  = 8
	u8   = 1
)

type tensor struct {
	elems int64
	dt    int64 // bytes per element
	base  *tensor
	blk   block
	refs  int32 // holders
	saves int32 // how many of the holders are autograd nodes
	req   bool
	param bool
	// buffer: a module buffer, the model's bytes however saved (cpRope).
	buffer bool
	// rowVec marks a vector computed elementwise from a parameter vector
	// (a cast, a scalar added: Gemma's 1 + weight.float()): broadcast over
	// the rows of a product's other operand, its gradient is a column sum,
	// as the parameter's own (sumBroadcast, isRowVec).
	rowVec bool
	// expanded marks a view that repeats its base with stride 0
	// (expandView): a cast of it is dense, and a matmul folding it
	// copies it as it copies a heads-major operand.
	expanded bool
	// perm marks a tensor whose memory is not in row-major order (a
	// transposed view, or an elementwise result that took such a layout):
	// kernels that need contiguous input copy it first.
	perm bool
	// gradPerm marks a tensor whose gradient arrives strided: it was
	// read through a transposed view (matmulView, transposeOp), so the
	// gradient comes back through the transpose.
	gradPerm bool
	// expert marks a routed expert's parameter (moe.go): under expert
	// parallelism with ZeRO 2 or 3 it is sharded over the dp·tp/ep ranks
	// that hold the same experts, not over every data-parallel rank.
	expert bool
	// dim1 marks a routed expert's fused weight that FSDP2 shards along its
	// second dimension, not along the experts (model.Training.FSDPExperts;
	// padShard).
	dim1 bool
	// plain marks a parameter a tensor-parallel rank holds as a plain
	// tensor, not a DTensor (markPlain): the optimizer steps it in a
	// parameter group of its own (adamStep).
	plain bool
	// unwaited marks a functional collective's output made in a
	// recompute that no op has read yet (sim.unwaited, leakUnwaited).
	unwaited bool
	// wrapped marks a tensor-parallel module's replicated input that each
	// column-parallel product wraps itself (fromLocalEach).
	wrapped bool
	// dtAct marks an activation that is a DTensor under sequence
	// parallelism (a SequenceParallel norm's input and rows, and under
	// torchtitan's plan the sequence gathered for a module's
	// column-parallel products; through transformers' forward the residual
	// stream, sim.dtStream): the autograd engine sums the gradients it
	// receives out of place (accumulate).
	dtAct bool
	// sdt is a ZeRO 2/3 shard's bytes per element when not the master
	// dtype's (LoRA's fp32 adapters over a half base, lora.go), else 0.
	sdt int8
	// from is the input of the elementwise activation that made this
	// tensor (activation): its backward computes the input's gradient in
	// the layout of this tensor's, so a strided gradient stays strided.
	from  *tensor
	cat   category // category the bytes are counted in now
	fixed category // category for tensors that are not activations
	grad  *tensor  // gradient accumulated during backward
	pgrad *tensor  // .grad of a parameter
	// product marks a gradient that came straight from a matrix
	// product's backward: a parameter's (a tied weight's two gradients,
	// sumTied) or a view of the product over a 3-D input (node.viewGrad,
	// which accumulate cannot add into in place); pass is the backward
	// pass a parameter's .grad was set in.
	product bool
	pass    int32
	// last and second are a parameter's last two dimensions (second is 0
	// for a vector), for Adafactor's factored state.
	last, second int64
	// lora is the adapter pair of a frozen weight LoRA wraps (lora.go).
	lora *adapter
	// quant marks a bitsandbytes-quantized frozen weight (quant.go).
	quant *qweight
	// prefix and name label the tensor in traces (label); kept apart so
	// that the simulation builds no strings.
	prefix, name string
}

func (t *tensor) bytes() int64 { return t.elems * t.dt }

// isRowVec reports whether t is a parameter vector or computed elementwise
// from one (tensor.rowVec).
func (t *tensor) isRowVec() bool { return t.rowVec || (t.param && t.second == 0) }

// label is the tensor's name in traces.
func (t *tensor) label() string { return t.prefix + t.name }

// partials is a two-pass column reduction's per-block partial sums: count
// tensors (one per reduced gradient) of rows × cols elements of dt bytes,
// made after the gradients, each summed down with a column sum's scratch.
type partials struct {
	rows, cols, dt int64
	count          int
}

// node is an autograd node: what it saved, the inputs it produces gradients
// for, and the outputs whose gradients it consumes.
type node struct {
	name    string
	saved   []*tensor
	ins     []*tensor
	outs    []*tensor
	bwdTemp int64 // transient bytes while the node runs in backward
	// tempHeld keeps bwdTemp until the node's gradients are accumulated:
	// a tied DTensor weight's whole gradient, freed only once the rank's
	// shard of it has been summed with the head's (vocabEmbeddingOp).
	tempHeld bool
	// reduceTemp is a temporary allocated after the gradients and freed
	// at once: a reduction's scratch (columnSumScratch), softmax's
	// grad * output (softmax).
	reduceTemp int64
	// gradWS are library workspaces taken and freed right after the
	// gradient of an input is allocated (cuDNN's convolution backward,
	// the embedding's and SDPA's), and a convolution's bias (inputWS.sum);
	// nil for every other node, which keeps nodes small.
	gradWS *[3]inputWS
	// ring is ring attention's backward (ringBackward), run in place of a
	// lump bwdTemp; nil for every other node.
	ring *ringBwd
	ckpt *ckpt // a checkpointed segment to recompute
	pass bool  // gradient passes through when sizes match (add, views)
	// negFirst marks a subtraction recorded as [subtrahend, minuend]:
	// the subtrahend's gradient is −grad, a new tensor (SubBackward0),
	// however pass treats the minuend's.
	negFirst bool
	// split marks a concatenation: its inputs' gradients are views of the
	// incoming one (CatBackward0 narrows it), no new tensor.
	split bool
	// sumsTo marks an expand whose backward sums the incoming gradient
	// down to the input's shape (ExpandBackward0: at::sum_to), an op of
	// autocast's fp32 list (config.bwdAutocast).
	sumsTo bool
	// viewGrad marks a product over a reshaped 3-D input: the input's
	// gradient is a view of the product's output (accumulate).
	viewGrad bool
	gemm     bool // backward runs GEMMs (needs the backward thread's cuBLAS workspace)
	// unit is the FSDP2 unit whose forward recorded the node (an index
	// into sim.units; 0, the root, outside FSDP2).
	unit int16
	// biasFirst marks AddmmBackward0 over [x, W, b]: its edges are
	// (self = b, mat1 = x, mat2 = W), so the engine runs the bias's
	// AccumulateGrad before the weight's (the gradient-ready order DDP
	// rebuilds its buckets in, ddp.go).
	biasFirst bool
	// early marks a node recorded by a checkpoint's recompute: its saved
	// tensors die when its backward returns (recompute).
	early bool
	// fnTemp marks a reduceTemp the node's own function makes (softmax's
	// grad * output), so an early node's saved tensors outlive it; a bias's
	// column sum is the engine's, after the function has returned.
	fnTemp bool
	// bcast marks a product whose inputs may be broadcast (Mul): a
	// broadcast input's gradient is computed at the output's size and
	// summed down to the input's by validate_outputs (runNode).
	bcast bool
	// dyFirst marks a backward that makes its incoming gradient
	// contiguous before anything else (cuDNN's convolution_backward),
	// which copies when the output's gradient arrives strided (gradPerm).
	dyFirst bool
	// dyCopy marks a backward that makes its incoming gradient contiguous
	// after allocating its own (layer_norm_backward_cuda's dY.contiguous()),
	// which copies when the output's gradient arrives strided (gradPerm).
	dyCopy bool
	// unitEntry marks the first node a nested FSDP2 unit (a block's
	// experts) records: in backward its input gradients pass through the
	// unit's post-backward before they reach the tensors outside
	// (fsdpLeaveNested).
	unitEntry bool
	// copyIn: the node's backward gets a copy of its incoming gradient,
	// the original freed first: the expert-parallel dispatch's all-to-all
	// (moe_ep.go: seen in allocator histories; which part of autograd makes
	// the copy is not traced), matmul's fold of a strided gradient
	// (eager.go), cuDNN's attention (mla.go), and a complex product whose
	// gradient comes back strided (view_as_real's backward, complexMul).
	copyIn bool
	// pairTemps is two temporaries of this size the backward makes
	// before the gradients and frees after them: pow_backward's
	// grad * (exponent * self.pow(exponent - 1)) makes self.pow(e - 1)
	// and exponent times it before the product (FunctionsManual.cpp).
	// With pairFirstDies the first is freed as soon as the second exists:
	// loss parallelism's (grad_input + exp(x)) * grad_output frees exp(x)
	// once the sum is made (torch/distributed/tensor/parallel/loss.py).
	pairTemps     int64
	pairFirstDies bool
	// partials is a two-pass column reduction's per-block partial sums
	// (layerNormPartials, partialSums); nil for every other node.
	partials *partials
	// frameEnd is the checkpoint node whose frame this node's saved
	// tensors keep alive last: it is released with them (recompute).
	frameEnd *node
}

// inputWS is the workspace taken after the gradient of input t. With sum
// set, t is a convolution's bias, whose gradient convolution_backward
// (aten/src/ATen/native/Convolution.cpp) sums from grad_output itself once
// the cuDNN call has returned: the call's contiguous copy of a strided
// grad_output (node.dyFirst) is gone by then, and the sum over a
// channels-last gradient is a column sum with its scratch
// (columnSumScratch; measured: ViT-B/16's patch embedding at batch 128,
// 132 MiB on an H100, bench/results/2026-11-23-h100-traces2/vit-ckpt).
type inputWS struct {
	t     *tensor
	bytes int64
	sum   bool
}

// sim is the state of one simulated training run.
type sim struct {
	// stopAbove is Options.StopAbove (0: simulate the whole run);
	// outside, with it, is surelyOutside as the simulation starts.
	stopAbove int64
	outside   []Item
	// passes counts backward passes (tensor.pass).
	passes int32
	// held is what a holding residual keeps (model.Residual.Hold and
	// HoldChunk): its branch output, and its activation's output and
	// input, freed in that order when the next layer returns.
	held [3]*tensor
	// forkHeld are the outputs of a holding fork's branches
	// (model.Fork.Hold), released by the enclosing residual after its add.
	forkHeld []*tensor
	al       allocator
	cfg      *config
	tape     []*node
	saving   bool
	stop     earlyStop
	preGrads []*tensor           // a segment tail's gradients, allocated before its recompute (ckpt.tail)
	preTemps []int64             // the backward temporaries that tail took and freed then (gradShape.temp)
	cache    map[*tensor]*tensor // autocast's weight-cast cache
	live     [numCats]int64
	thread   int // 0 forward (main), 1 backward (autograd's device thread)
	ws       [2]bool
	lt       [2]bool
	used     usage
	smReds   []smReduce // the reductions the SM count sized (columnSumScratch)
	phase    Phase
	peak     peakState
	phases   []PhasePeak
	trace    func(t *tensor, alloc bool) // debugging hook: every allocation and free
	// traceAddr is the debugging hook of the address model's events
	// (addressEvent), for traces that replay as the estimate ran.
	traceAddr func(kind evKind, n int64)
	params    []*tensor
	attn      attnState // the attention forward's state (attnState)
	frozen    []*tensor // LoRA's frozen base parameters (lora.go)
	kvHold    []*tensor // KV-cache copies held until the forward's outputs are dropped
	bodyHold  []*tensor // the base model forward's locals (Positions.Hold, Repeat.HoldInput), until it returns
	embHold   []*tensor // the embeddings module's locals (HoldLocal), until a repeat starts
	lossHold  []*tensor // the task model forward's locals (model.Linear.Head), until the loss
	unitHold  []*tensor // a decoder layer's locals (eager attention's weights), until the unit returns (step1)
	// hostWrap: FSDP2 shards a model built on the host (wrapFromHost),
	// moved whole to the GPU first with wrapGPU; unsharded are the
	// parameters whose shards it has yet to allocate.
	hostWrap, wrapGPU bool
	// wrapEmpties: the script empties the cache once wrapFromHost is done
	// (model.Training.EmptyCacheAfterWrap).
	wrapEmpties bool
	unsharded   []*tensor
	gathered    int64       // ZeRO-3: bytes of parameters gathered during a step
	gatherT     *tensor     // the gathered parameters while they are held
	units       []*fsdpUnit // FSDP2's units, the root first (fsdp_units.go)
	// curUnit is the FSDP2 unit running its forward; bwdUnit the one
	// whose backward nodes are running (fsdp.go).
	curUnit, bwdUnit int16
	perParam         bool      // FSDP2's unsharded storages per unit and parameter (fsdp.go)
	expertBuild      bool      // the parameters being built are routed experts' (moe.go)
	tpSP             bool      // tensor parallelism with sequence parallelism: the norms are DTensors (markPlain)
	moduleHold       []*tensor // what a tensor-parallel module's call holds until it returns (closeModule)
	tpAllToAll       bool      // the tensor-parallel program exchanges all-to-all over the tp group (layoutNCCL)
	tpModule         bool      // inside a tensor-parallel module's call, before its output collective (atReturn)
	unwaited         []*tensor // a recompute's functional-collective outputs (tensor.unwaited)
	leaked           int64     // bytes leakUnwaited kept for good in the first step
	metaTP           bool      // a tensor-parallel program built on the meta device, then to_empty (reallocate)
	// wholeSeq is what the rank's sequence is multiplied by to give the
	// length transformers' forward makes its rotary tables and masks for
	// (prologue): the tp degree under sequence parallelism of a model run
	// through it, whose residual stream is a DTensor with the whole
	// sequence's shape (bench/torch/dist/hftp.py); else 1.
	wholeSeq  int64
	rootKept  bool  // FSDP2's root stays unsharded after the forward (model.FSDPRootKeep)
	reshardTo int64 // FSDP2's reshard_after_forward=N (model.Training.ReshardAfterForward; 0: all ranks)
	// ropeInputsFP32 says the rotary tables the blocks take are fp32 under
	// a half stream (model.Attention.RoPEFP32: OLMo's), which FSDP2's
	// bf16 policy casts at each unit's pre-forward (castRope).
	ropeInputsFP32 bool
	rec            *stepLog // the step being recorded for replay, or nil (replay.go)
	calls          int      // allocations and frees so far (madeBlock, dropBlock): a recording's expected length
	traceSteps     bool     // a traced simulation keeps the untraced one's steps (stepsComparable)
	recomputing    bool     // a checkpoint's recompute runs, inside the backward (checkpoint.go)
	rsInput        *tensor  // FSDP2's last reduce-scatter input (fsdp.go)
	// agState is the forward's last all-gather output, agNext the
	// backward's prefetched one (for unit agNextUnit) (fsdp.go).
	agState, agNext *tensor
	agNextUnit      int16
	unitOf          map[*tensor]*fsdpUnit // each parameter's unit
	ddp             *ddpState             // DDP's reducer (ddp.go)
	ddpMods         []*ddpState           // every stage module's, interleaved (ddp.go)
	buffers         []*tensor             // module buffers, in the order built
	zeroPart        *parallel.Partition   // ZeRO-1's partition over the ranks
	pp              *pipeline             // the pipeline stage simulated, or nil (pipeline.go)
	ckptMode        string
	ckptK           int64
	ropeT           [4]*tensor // cos and sin tables of the current forward, then the local ones (LocalRoPE)
	cpRope          *cpRope    // context_parallel's handling of the rotary buffer (contextparallel.go), or nil
	// rank is the running layer's per-sample input rank: 2 or more makes
	// a linear layer's input 3-D, reshaped to a matrix (viewGrad).
	rank int
	// mask is the current forward's attention mask: eager attention's
	// causal mask, or under SDPA the boolean mask of the layers that
	// attend through a sliding window no longer than the sequence
	// (slidingBool).
	mask *tensor
	// mask2 is eager attention's second mask in a model whose layers
	// attend both in full and through a sliding window (Gemma 2):
	// transformers builds one per kind of layer.
	mask2 *tensor
	// maskLocal: mask is the model forward's local, freed when it returns
	// (prologue, dropBodyHold).
	maskLocal bool
	saved     int64     // bytes saved for backward at the end of the last forward
	notes     []string  // things the result should say about how it was simulated
	scratch   []*tensor // runNode's gradients, reused
	// spareTapes are recomputed segments' tapes, whose memory the next
	// recompute reuses (subTape).
	spareTapes [][]*node
	slab       slabs // tensors, nodes and pointer lists, allocated in chunks
	err        error // a failure to read a measured table

	// recomputed, when set, orders a recomputed segment's nodes as
	// autograd's sequence numbers do when some of its casts were made by
	// an earlier forward (pipeline.go).
	recomputed func(sub []*node) []*node
	// noSync is FSDP's set_requires_gradient_sync(False): whole gradients
	// accumulate and are reduce-scattered later (pipeline.go).
	noSync bool
	// wholeGrads are tensor parallelism's whole gradients of sharded
	// parameters (tensorparallel.go), freed with the parameters' .grad.
	wholeGrads []wholeGrad
	// unreplaced are the whole parameters of a tensor-parallel load that
	// the next parameters built replace, in order (loadWhole).
	unreplaced []*tensor
	// wholeBuild is set while loadWhole builds the whole model, and
	// tiedWhole is then its weight tied to two modules; untied are the
	// shards parallelize_module makes of it for its second module, freed
	// when the script ties the two again (loadWhole).
	wholeBuild bool
	tiedWhole  *tensor
	untied     []*tensor
	// dtensor is set when the parameters are DTensors (tensor
	// parallelism): the engine sums a tied weight's two gradients out of
	// place, since InputBuffer::accumulate adds in place into plain
	// tensors only (torch/csrc/autograd/input_buffer.cpp).
	dtensor bool
	bnb     bnbState // bitsandbytes: quantized base, paged state (quant.go)

	// rotaryElems is the length of a transformers rotary embedding's
	// inv_freq buffers (0 without one), which DDP broadcasts.
	rotaryElems int64
	// layerAt is the model's index of the repeat copy being built (build,
	// model.Repeat.First), for layers that differ by index.
	layerAt int64
}

// usage records which library paths the step touches: half-precision
// GEMMs load more kernel modules outside the allocator (docs/formulas.md §D).
type usage struct {
	gemmHalf bool
}

type peakState struct {
	allocated, reserved int64
	at                  Phase
	live                [numCats]int64
}

func (s *sim) catOf(t *tensor) category {
	switch {
	case t.param || t.buffer:
		return catParam
	case t.saves > 0:
		return catSaved
	}
	return t.fixed
}

// recat moves a tensor's bytes to the category it belongs to now.
func (s *sim) recat(t *tensor) {
	if t.base != nil || !t.blk.Valid() {
		return
	}
	c := s.catOf(t)
	if c != t.cat {
		if s.rec != nil {
			s.rec.ev = append(s.rec.ev, stepEvent{kind: evRecat, n: t.bytes(), cat: t.cat, to: c})
		}
		s.live[t.cat] -= t.bytes()
		s.live[c] += t.bytes()
		t.cat = c
	}
}

// alloc allocates a tensor held once by the caller.
func (s *sim) alloc(elems, dt int64, cat category, name string) *tensor {
	t := s.unmade(elems, dt, cat, name)
	s.make(t)
	return t
}

// unmade is a tensor held once by the caller, with no memory yet (make).
func (s *sim) unmade(elems, dt int64, cat category, name string) *tensor {
	t := s.slab.tensor() // zeroed: set the fields one by one, no struct copy
	t.elems, t.dt, t.refs, t.fixed, t.cat, t.name = elems, dt, 1, cat, cat, name
	return t
}

// make allocates t's memory, unless a checkpoint's recompute has stopped
// (earlyStop): then t stays a placeholder with no block.
func (s *sim) make(t *tensor) {
	if s.stop.stopped {
		return
	}
	n := t.bytes()
	t.blk = s.al.malloc(n)
	s.madeBlock(t, n, 0)
}

func (s *sim) ref(t *tensor) *tensor { t.refs++; return t }

// unref drops one holder; the last one frees the storage. It is small
// enough to be inlined where most calls end: a nil tensor, or one still
// held.
func (s *sim) unref(t *tensor) {
	if t != nil {
		t.refs--
		if t.refs <= 0 {
			s.unheld(t)
		}
	}
}

// unheld is unref of a tensor whose last holder has gone: a view drops its
// base, a tensor with storage frees it.
func (s *sim) unheld(t *tensor) {
	if t.base != nil {
		s.unref(t.base)
		return
	}
	if t.blk.Valid() {
		s.dropBlock(t)
		t.blk = 0
	}
}

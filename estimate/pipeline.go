package estimate

import (
	"slices"

	"github.com/memplan/memplan/model"
)

// Pipeline parallelism as torch.distributed.pipelining (PyTorch 2.11) runs
// it, lowered to one stage's program (docs/parallelism.md §3.2): the
// stage's layers (model.LowerStage), the buffers _PipelineStage keeps, and
// the schedule's order of forward and backward micro-batch steps, replayed
// through the same simulator as a single GPU's step.
//
//   - Setup, on the first step (PipelineStage's runtime shape inference,
//     _prepare_forward_infra, _prepare_backward_infra): one forward under
//     no_grad on zeros of the micro-batch's input, inside the step's
//     autocast region (its weight casts stay cached); then a receive
//     buffer per micro-batch for the stage input on every stage but the
//     first and a gradient-receive buffer per micro-batch for the stage
//     output on every stage but the last, allocated once and kept.
//   - Forward of micro-batch j: the input is receive buffer j (a leaf that
//     requires grad) or the token ids; fwd_cache keeps the output until
//     backward j; on the last stage output_chunks also keep it (the logits)
//     until the next step() begins, and the loss function (torchtitan's
//     and bench/torch/dist's: logits.float(), cross_entropy) runs on it.
//   - Backward of micro-batch j: from the loss, or from the output with
//     gradient-receive buffer j as its gradient; the input's gradient is
//     taken off the buffer (stage_backward sets .grad = None) and sent.
//   - Sends and receives are batched NCCL point-to-point operations.
//     ProcessGroupNCCL stashes their tensors in the Work (no recordStream)
//     until the schedule waits on it; the P2POp lists the schedule keeps
//     in local variables hold them too, until replaced.
//   - The autocast region wraps the whole step(): its weight-cast cache
//     lives from the first forward to the end of the last backward. At the
//     end the last stage merges its output chunks (torch.cat of every
//     micro-batch's logits, returned and dropped by the caller).

// pipeline is one stage's program and what it holds across micro-batches.
// A rank holds one stage, or several under the interleaved schedule: local
// lists them all (the rank's first stage leads), order is the rank's
// compute actions then.
type pipeline struct {
	stage, stages int64
	schedule      string
	layers        []model.Layer
	blocks        int64
	recv, gradIn  []*tensor // receive buffers: stage input, output gradient
	chunks        []*tensor // output_chunks (last stage)
	flights       map[int]*flight
	inSh          model.Shape
	data, labels  *tensor
	// casts are autocast's cached weight casts in the order they were
	// made, with the ToCopy node each one's gradient goes through, less
	// those no longer cached (a recompute clears the cache); nodeOf has
	// every cast's node by its half copy, cached or not.
	casts  []cast
	nodeOf map[*tensor]*node
	cur    *flight // the micro-batch in backward
	// ins, params and buffers are the stage's built layers, parameters
	// and buffers; params and buffers are nil for a rank of one stage
	// (all of the rank's). ddp is the stage module's own
	// DistributedDataParallel under the interleaved schedule (ddp.go).
	ins     []*inst
	params  []*tensor
	buffers []*tensor
	ddp     *ddpState
	local   []*pipeline
	order   []model.PPAction
	// castOrder is each parameter's place among the cached weight casts,
	// in the order they were first made (keepCasts; byCastOrder).
	castOrder map[*tensor]int
	// lossParallel computes the last stage's loss on the logits' shards.
	lossParallel bool
	// modelForward says the stages run transformers' model forward
	// (model.Model.RunsTransformersForward): its prologue in every stage's forward.
	modelForward bool
	// tpAllToAll: the stages exchange all-to-all over tp (pipelineNCCL).
	tpAllToAll bool
	// embeddingGroup says the rank holds the first or the last stage of a
	// model with tied embeddings: it all-reduces the two copies'
	// gradients over the embedding group (model's stageSlice), one more
	// NCCL communicator (pipelineNCCL).
	embeddingGroup bool
}

// flight is a micro-batch between its forward and its backward.
type flight struct {
	tape []*node
	// shared are the ToCopy nodes of the cached casts this forward used
	// but an earlier one made (cast.node), in the order they were made;
	// earlier are their parameters. deferred are recomputed segments'
	// ToCopy nodes that stand for those casts (ppRecomputed).
	shared   []*node
	earlier  map[*tensor]bool
	deferred []*node
	out      *tensor // fwd_cache's stage output
	loss     *tensor
	rope     [4]*tensor
}

func (p *pipeline) first() bool { return p.stage == 0 }
func (p *pipeline) last() bool  { return p.stage == p.stages-1 }

// newPipeline lowers spec to the program of one pipeline rank: its stage,
// or under the interleaved schedule its stages (model.Training.RankStages).
func newPipeline(spec *model.Spec, rank int64) (*pipeline, error) {
	t := spec.Training
	if err := t.PipelineOK(&spec.Model); err != nil {
		return nil, err
	}
	stages := t.PipelineStages()
	split, err := model.StageLayers(spec.Model.NumLayers, stages)
	if err != nil {
		return nil, err
	}
	var local []*pipeline
	for _, st := range t.RankStages(rank) {
		layers, err := spec.Model.LowerStageRank(st, stages, &t)
		if err != nil {
			return nil, err
		}
		local = append(local, &pipeline{stage: st, stages: stages, schedule: t.PPSchedule, layers: layers,
			blocks: split[st], flights: map[int]*flight{}, lossParallel: t.LossParallel && t.TP > 1})
	}
	p := local[0]
	p.local = local
	p.modelForward = spec.Model.RunsTransformersForward()
	p.tpAllToAll = tpAllToAll(t, &spec.Model)
	for _, q := range local {
		p.embeddingGroup = p.embeddingGroup || spec.Model.Tied && (q.first() || q.last())
	}
	if t.PPSchedule == model.PPInterleaved {
		if p.order, err = model.InterleavedOrder(rank, t.PP, t.Virtual(), t.GradAccum); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// rankLayers is every layer the rank's stages hold.
func (p *pipeline) rankLayers() []model.Layer {
	if len(p.local) == 1 {
		return p.layers
	}
	var out []model.Layer
	for _, q := range p.local {
		out = append(out, q.layers...)
	}
	return out
}

// rankBlocks is the blocks the rank's stages hold.
func (p *pipeline) rankBlocks() int64 {
	var n int64
	for _, q := range p.local {
		n += q.blocks
	}
	return n
}

// buildStages builds each of the rank's stages (each its own module, as
// PipelineStage wraps one) and returns their layers' instances in order.
func (s *sim) buildStages() []*inst {
	var all []*inst
	for _, q := range s.pp.local {
		at, bat := len(s.params), len(s.buffers)
		q.ins = s.build(q.layers, map[string]*tensor{})
		if len(s.pp.local) > 1 {
			q.params = s.params[at:len(s.params):len(s.params)]
			q.buffers = s.buffers[bat:len(s.buffers):len(s.buffers)]
		}
		all = append(all, q.ins...)
	}
	return all
}

// setShapes sets each stage's input shape from the rank's spec (under
// context parallelism, the rank's share of the sequence).
func (p *pipeline) setShapes(spec *model.Spec) {
	for _, q := range p.local {
		q.inSh = spec.InputShape()
		if q.stage > 0 {
			q.inSh = model.Shape{boundarySeq(spec), spec.Model.Hidden}
		}
	}
}

// boundarySeq is the tokens of the stage boundary: the rank's sequence
// (under context parallelism its share, which the spec already has), or
// its shard under sequence parallelism, where the residual stream between
// modules is the local tensor of a Shard(1) DTensor (RowwiseParallel's
// and SequenceParallel's outputs, use_local_output).
func boundarySeq(spec *model.Spec) int64 {
	t := spec.Training
	if t.TP > 1 && t.SP {
		return t.Seq / t.TP
	}
	return t.Seq
}

// boundary allocates one tensor of the stage boundary: [b, s, hidden] in
// the residual stream's dtype, which is the parameters' (the embedding's
// output, to which every block adds).
func (s *sim) boundary(spec *model.Spec, name string) *tensor {
	t := s.alloc(s.cfg.batch*boundarySeq(spec)*spec.Model.Hidden, s.cfg.param, catTemp, name)
	t.fixed = catPipe
	s.recat(t)
	return t
}

// pipelineSetup is what the first step() does before its first
// micro-batch (_initialize_stages): the neighbours' warm-up sends and
// receives (NCCL's first connection), each stage's shape inference
// forward and receive buffers, then its gradient receive buffers.
func (s *sim) pipelineSetup(spec *model.Spec) {
	p := s.pp
	s.enter(0, 0, "pipeline setup")
	s.peerConnected()
	var warm []*tensor
	for range p.local {
		warm = append(warm, s.alloc(1, f32, catTemp, "p2p warm-up recv"), s.alloc(1, f32, catTemp, "p2p warm-up send"))
	}
	s.dropAll(warm)
	m := int(spec.Training.GradAccum)
	for _, q := range p.local {
		s.pp = q
		s.shapeInference(spec, q)
		for j := 0; j < m && !q.first(); j++ {
			b := s.boundary(spec, "pipeline receive buffer")
			b.req = true
			q.recv = append(q.recv, b)
		}
	}
	for _, q := range p.local {
		for j := 0; j < m && !q.last(); j++ {
			q.gradIn = append(q.gradIn, s.boundary(spec, "pipeline gradient receive buffer"))
		}
	}
	s.pp = p
}

// shapeInference is _shape_inference: zeros like the micro-batch's input,
// the stage's forward under no_grad (nothing saved, no graph kept). The
// zeros are a local of _shape_inference, alive until it returns, the
// forward's output after them (measured: Llama 4's later stages free the
// input with the logits as _prepare_forward_infra returns,
// bench/results/2026-11-28-h200x4-pp-llama4-traces).
func (s *sim) shapeInference(spec *model.Spec, q *pipeline) {
	var x *tensor
	if q.first() {
		x = s.alloc(s.cfg.batch*spec.Training.Seq, i64, catTemp, "shape inference input")
	} else {
		x = s.alloc(s.cfg.batch*boundarySeq(spec)*spec.Model.Hidden, s.cfg.param, catTemp, "shape inference input")
	}
	s.gather()
	saving := s.saving
	s.saving = false
	args := s.ref(x)
	out, _ := s.run(q.ins, x, q.inSh)
	s.saving = saving
	s.keepCasts(s.tape, nil)
	s.tape = nil
	s.unref(args)
	s.unref(out)
	s.endForward()
	s.dropRope()
}

// endForward drops what one forward of the model holds until its outputs
// are dropped: eager attention's mask and the key/value cache's copies.
func (s *sim) endForward() {
	s.dropMasks()
	s.dropKVHold()
	s.dropBodyHold() // and the embeddings module's
	s.dropLossHold()
}

// dropRope drops the rotary tables of the current forward.
func (s *sim) dropRope() {
	for i, r := range s.ropeT {
		s.unref(r)
		s.ropeT[i] = nil
	}
}

// ppForward is forward_one_chunk for micro-batch j (and the loss on the
// last stage). It returns the tensors the stage sends: its output.
func (s *sim) ppForward(it, j int, ins []*inst) []*tensor {
	p := s.pp
	s.enter(it, j, StageForward)
	s.thread = 0
	s.saving = true
	s.gather()
	var x *tensor
	if p.first() {
		x = s.view(p.data, s.cfg.batch*p.inSh[0]) // tensor_split: a view
	} else {
		x = s.ref(p.recv[j])
	}
	fl := &flight{earlier: map[*tensor]bool{}}
	cached := p.casts[:0]
	for _, c := range p.casts {
		if s.cache[c.param] == c.half {
			fl.shared = append(fl.shared, c.node)
			fl.earlier[c.param] = true
			cached = append(cached, c)
		}
	}
	p.casts = cached // a cast once evicted is never cached again
	out, sh := s.run(ins, x, p.inSh)
	s.rootPostForward() // fsdp.go: the last all-gather output freed
	s.dropLossHold()    // pp.HFStage returns before the schedule's loss: its head's input goes
	fl.out = out
	if p.last() {
		p.chunks = append(p.chunks, s.ref(out))
		f := s.to(out, f32)
		if p.lossParallel {
			fl.loss = s.parallelCrossEntropy(f)
		} else {
			fl.loss = s.crossEntropy(f, s.rows(sh))
		}
		s.unref(f)
	}
	fl.tape, s.tape = s.tape, nil
	s.keepCasts(fl.tape, fl)
	s.endForward()
	fl.rope, s.ropeT = s.ropeT, [4]*tensor{}
	p.flights[j] = fl
	s.saved = max(s.saved, s.live[catSaved])
	if p.last() {
		return nil
	}
	return []*tensor{out}
}

// byCastOrder is the ToCopy nodes of the casts a micro-batch's forward
// found cached (shared) and those its recomputed segments stand in for
// them (deferred), in the order the casts were first made: autograd runs
// the ready nodes by sequence number, the latest first, so once the
// micro-batch's own nodes are done these run from the last-made cast (the
// head's) back (measured: GPT-OSS's last stage, whose head weight's
// gradient comes before its blocks', bench/results/2026-11-27-h200x4-pp-moe-hf-traces).
func (p *pipeline) byCastOrder(shared, deferred []*node) []*node {
	out := append(append(make([]*node, 0, len(shared)+len(deferred)), shared...), deferred...)
	slices.SortStableFunc(out, func(a, b *node) int { return p.castOrder[a.ins[0]] - p.castOrder[b.ins[0]] })
	return out
}

// ppBackward is backward_one_chunk for micro-batch j. It returns the
// tensors the stage sends: the input's gradient.
func (s *sim) ppBackward(it, j int) []*tensor {
	p := s.pp
	s.enter(it, j, StageBackward)
	s.thread = 1
	fl := p.flights[j]
	delete(p.flights, j)
	s.ropeT = fl.rope
	if p.last() {
		fl.loss.grad = s.alloc(1, f32, catTemp, "loss grad")
	} else {
		fl.out.grad = s.ref(p.gradIn[j])
	}
	p.cur = fl
	s.backward(fl.tape)
	s.backward(p.byCastOrder(fl.shared, fl.deferred))
	p.cur = nil
	s.unref(fl.out)
	if fl.loss != nil {
		s.unref(fl.loss) // the schedule's loss list holds a scalar; dropped here
	}
	s.dropRope()
	s.dropMasks()
	if p.first() {
		return nil
	}
	g := p.recv[j].grad
	p.recv[j].grad = nil
	if g == nil {
		return nil
	}
	return []*tensor{g}
}

// hold is a list of tensors kept alive by a Python variable or a Work.
type hold []*tensor

func (s *sim) let(h *hold, ts []*tensor) {
	s.drop(h)
	for _, t := range ts {
		s.ref(t)
	}
	*h = ts
}

func (s *sim) drop(h *hold) {
	for _, t := range *h {
		s.unref(t)
	}
	*h = nil
}

// dropAll drops one reference to each of ts.
func (s *sim) dropAll(ts []*tensor) {
	for _, t := range ts {
		s.unref(t)
	}
}

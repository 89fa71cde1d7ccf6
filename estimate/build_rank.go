package estimate

import (
	"fmt"

	"github.com/memplan/memplan/model"
)

// Building one rank's modules on the device, as the training script builds
// them (docs/parallelism.md §3.1, docs/multigpu.md).

// buildRank builds the rank's modules on the device: a pipeline rank's
// stages (made on the meta device, no whole load), or the whole program,
// under tensor parallelism after loading the model whole when it is built
// on the GPU first (fsdp_init gpu, as bench/torch/dist/tp.py does:
// loadWhole); otherwise each shard is allocated directly, as torchtitan's
// meta-device build and transformers' sharded loading do. It returns the
// built instances and the layers the rank holds; m is the model, whose
// tensor-parallel program may be transformers' forward
// (model.Model.RunsTransformersForward).
func (s *sim) buildRank(t, run model.Training, layers, prog []model.Layer, m *model.Model) ([]*inst, []model.Layer) {
	runsModel := m.RunsTransformersForward()
	s.dtensor, s.tpSP = t.TP > 1, t.SP
	s.tpAllToAll = tpAllToAll(t, m)
	s.rootKept = t.FSDPRoot == model.FSDPRootKeep
	s.reshardTo = t.ReshardAfterForward
	s.wholeSeq = 1
	if t.TP > 1 && runsModel && t.SP {
		s.wholeSeq = t.TP
	}
	if s.pp != nil {
		// The rank's stages, each built on its own (pipeline.go).
		s.cfg.modelRope = s.pp.modelForward
		s.cfg.bwdAutocast = s.cfg.amp // the step's autocast region holds its backward
		return s.buildStages(), s.pp.rankLayers()
	}
	done := func() {}
	s.metaTP = t.TP > 1 && t.FSDPInit != model.FSDPInitGPU
	switch {
	case t.TP > 1 && t.FSDPInit == model.FSDPInitGPU:
		done = s.loadWhole(layers, prog, t)
	case t.TP > 1:
		s.note("tensor parallelism: the model is taken to be built on the meta device and split there, each shard allocated directly (torchtitan); --fsdp-init gpu if it is built whole on the GPU first")
	}
	gqaRing := run.CP > 1 && m.KVHeads > 0 && m.Heads != m.KVHeads
	switch {
	case !runsModel && (t.TP > 1 || gqaRing):
		s.note(titanNote)
	case gqaRing:
		s.note("context parallelism through transformers' forward: its SDPA call passes enable_gqa, so the ring takes the key/value heads as they are (docs/parallelism.md §3.0)")
	}
	if t.TP > 1 && runsModel {
		stream := "the residual stream whole on every rank (no sequence parallelism)"
		if t.SP {
			stream = "the residual stream a DTensor split along the sequence, whose whole shape the forward's rotary tables and masks are made for"
		}
		split := ""
		switch {
		case m.Experts > 0 && t.EP > 1:
			split = ", each tp rank routing its sequence shard to experts split over ranks"
		case m.Experts > 0:
			split = ", the experts split by columns with the router replicated"
		}
		s.note("tensor parallelism through transformers' forward: " + stream + split + ", as bench/torch/dist/hftp.py splits the model (docs/parallelism.md §3.1.3–3.1.7)")
	}
	s.hostWrap = WrapsWhole(t) && s.fsdpStreams()
	s.wrapGPU = t.FSDPInit == model.FSDPInitGPU
	s.wrapEmpties = t.EmptyCacheAfterWrap
	if t.TP <= 1 && s.fsdpStreams() {
		s.note(fsdpInitNote(&t))
		s.notePaddedExperts(t, m)
	}
	ins := s.build(prog, map[string]*tensor{})
	if run.CP > 1 && !runsModel {
		s.cpRopeBuffer(ins, run.Seq, run.CP) // the model's rotary buffer, after its parameters
	}
	// torchtitan's Llama (bench/torch/dist's) holds its rotary tables as a
	// buffer; transformers' forward makes them, also under tensor
	// parallelism of a model split through it (RunsTransformersForward).
	s.cfg.modelRope = (t.TP <= 1 && run.CP <= 1) || runsModel
	done()
	return ins, layers
}

// titanNote says what program a Llama-shaped spec under tensor or context
// parallelism is simulated as (model.Model.RunsTransformersForward false:
// a model read from its transformers config runs transformers' forward).
const titanNote = "parallel layouts of a Llama-shaped spec: simulated as torchtitan's Llama runs them, its rotary tables a buffer, no key/value cache, the key/value heads repeated before context parallelism's ring; read from its transformers config (--hf) the model runs transformers' forward instead (docs/parallelism.md §3.0)"

// tpAllToAll says whether the tensor-parallel program of m under t
// exchanges tensors all-to-all over the tp group (OLMo 2's and 3's query
// and key norms, model.Attention.QKNormRanks), inside pipeline stages too,
// which connects every other tp rank point to point (layoutNCCL).
func tpAllToAll(t model.Training, m *model.Model) bool { return t.TP > 1 && m.QKNormWhole }

// fsdpInitNotes say how the model was taken to reach fully_shard
// (model.Training.FSDPInit): the holes the freed whole parameters leave
// change reserved memory by up to 14% (docs/multigpu.md).
var fsdpInitNotes = map[string]string{
	model.FSDPInitHost: "FSDP2: the model is taken to be built on the host and sharded unit by unit (transformers' from_pretrained); --fsdp-init gpu if it is moved to the GPU first, meta if made on the meta device (torchtitan)",
	model.FSDPInitGPU:  "FSDP2: the model is taken to be moved whole to the GPU before fully_shard (--fsdp-init gpu)",
	model.FSDPInitMeta: "FSDP2: the model is taken to be made on the meta device, each shard allocated directly (--fsdp-init meta, torchtitan)",
}

// fsdpInitNote is fsdpInitNotes' note for t, with what becomes of the
// blocks the freed whole parameters leave cached when the model was on
// the host or the GPU whole (model.Training.EmptyCacheAfterWrap): they
// move the steps' reserve by up to 8% either way (docs/multigpu.md).
func fsdpInitNote(t *model.Training) string {
	n := fsdpInitNotes[t.FSDPInit]
	switch {
	case t.FSDPInit == model.FSDPInitMeta:
		return n
	case t.EmptyCacheAfterWrap:
		return n + "; the cache emptied after wrapping (--empty-cache-after-wrap)"
	}
	return n + "; the blocks the freed whole parameters leave stay cached for the steps, as accelerate leaves them (--empty-cache-after-wrap if the script empties the cache after fully_shard)"
}

// notePaddedExperts says when FSDP2 shards a rank's experts over more
// ranks than they have rows (model.Model.ShardedExpertRows): each shard is
// padded to ceil(rows/n) rows and each all-gather moves n of them, so
// more GPUs cost memory there.
func (s *sim) notePaddedExperts(t model.Training, m *model.Model) {
	if !model.ExpertsPadded(m.ShardedExpertRows(&model.Training{}), &t) {
		return
	}
	rows := m.ShardedExpertRows(&t)
	n := max(t.DP, 1) * max(t.CP, 1) * max(t.TP, 1) / max(t.EP, 1)
	s.note(fmt.Sprintf("FSDP2 shards each block's %d experts along their first dimension over %d ranks: every shard is padded to %d row(s) and every all-gather moves %d of them, %.0f× the experts' size, so more GPUs cost memory here (torchtitan shards experts along their second dimension when its ranks outnumber them: say so with --fsdp-experts auto; expert parallelism also avoids it)",
		rows, n, (rows+n-1)/n, n, float64(n*((rows+n-1)/n))/float64(rows)))
}

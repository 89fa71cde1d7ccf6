package estimate

import (
	"fmt"

	"github.com/memplan/memplan/model"
)

// The schedules of torch.distributed.pipelining (schedules.py,
// PipelineScheduleSingle), replayed step by step for one stage: which
// micro-batch runs forward or backward when, and which Python variables
// and NCCL Works hold the tensors sent meanwhile (docs/parallelism.md
// §3.2). The micro-batches themselves are ppForward and ppBackward
// (pipeline.go).

// PipelineNote, the note every estimate of pipeline stages carries, says
// what memplan does not model of a pipeline stage's reserved memory (memplan
// plan gives the same headroom, PipelineUnder, under pipeline layouts): all
// of the driver's placement of segments (it models
// the room cuBLAS's first product opens, the first communicator's chunks
// and the host memory NCCL's set-up and cuBLAS's handle map into the
// context's freed reservation: docs/allocator.md §8), on which these
// stages' reserve is most sensitive (docs/parallelism.md §3.2.9–§3.2.12).
// The figure is the worst measured among the committed pipeline runs, to
// the next tenth of a percent (bench/pp_test.go's TestPipelineAccuracy
// holds it to them): Qwen's tied interleaved pipeline over four stages,
// −6.0%, the harness's bf16 rotary tables (+0.1% with them in fp32).
// Held-out set 64's interleaved pipeline over pp 2 × tp 2 (Llama-3-8B, 8
// micro-batches of 8,192 tokens), −10.7% until the forty-second session
// summed a DTensor's gradients out of place (tensor.dtAct), is +3.3%.
var PipelineNote = fmt.Sprintf("pipeline stages: where the driver places segments (the room cuBLAS's first product opens, NCCL's chunks and the host memory its set-up maps as the stages' and data-parallel groups' communicators connect) decides part of reserved memory, which memplan models only in part; measured pipeline runs reserved up to %.1f%% more than predicted (docs/allocator.md §8, docs/parallelism.md §3.2.11–§3.2.12): leave that headroom", 100*PipelineUnder)

// PipelineUnder is the most a committed pipeline run reserved above
// memplan's prediction, as a fraction of the run's peak reserved
// (PipelineNote says which run).
const PipelineUnder = 0.060

// trainPipeline simulates two optimizer steps of one stage, as the
// training loop of bench/torch/dist/pp.py (and torchtitan) runs them:
// step() under autocast, then the optimizer and zero_grad(set_to_none);
// and a third when the second mapped more memory, train's rule where it
// cannot compare steps' states (measured: TinyLlama's GPipe of eight
// micro-batches, whose last stage reserved 32.41 GiB after two steps and
// 33.63 after three, −4.8% → −1.2% with the third;
// bench/results/2026-11-23-h200x2-tp.jsonl). Pipelines keep that rule:
// simulating their steps until the cache repeats, as train does, moved no
// measured pipeline line (thirty-fifth session) and would cost the planner
// whole steps, which a pipeline cannot replay (replay.go records train's).
func (s *sim) trainPipeline(spec *model.Spec) {
	p := s.pp
	s.recomputed = s.ppRecomputed
	if s.cfg.zero >= 2 {
		// FSDP under a pipeline (torchtitan, stage.py): no resharding after
		// forward or backward, gradients kept whole until the step's last
		// backward (backward_maybe_with_nosync), then reduce-scattered.
		// Each unit's storages are its own (fsdp.go).
		s.noSync = true
		if !s.perParam {
			s.gathered = s.paramTotal()
		}
	}
	t := spec.Training
	s.note(PipelineNote)
	m := int(t.GradAccum)
	// The whole batch, made on every rank: labels and token ids.
	rows := s.cfg.batch * int64(m) * t.Seq
	p.labels = s.alloc(rows, i64, catData, "labels")
	p.data = s.alloc(rows, i64, catData, "input ids")
	p.setShapes(spec)
	for it, grew := 0, true; it < 2 || it < maxSteps && grew; it++ {
		start := s.al.reserved
		// step(): clear_runtime_states drops the last step's output chunks;
		// the first step prepares the stages first.
		for _, q := range p.local {
			s.dropAll(q.chunks)
			q.chunks = nil
		}
		if it == 0 {
			s.pipelineSetup(spec)
		}
		if it == 1 {
			// The stage's first forward of the second step rebuilds DDP's
			// buckets (forward_maybe_with_nosync runs DDP's _pre_forward;
			// the last micro-batch's synchronised backward recorded the
			// order, ddp.go).
			s.ddpRebuild()
		}
		switch p.schedule {
		case model.PPGPipe:
			s.gpipe(it, m, p.ins)
		case model.PPInterleaved:
			s.interleaved(it)
		default:
			s.oneFOneB(it, m, p.ins)
		}
		s.stepEnd()
		s.stepOptimizer(t, it)
		grew = s.al.reserved > start
	}
}

// gpipe is ScheduleGPipe: every forward, waiting on the forward sends
// after the last, then every backward, waiting on the backward sends
// after the last. ops is the loop's variable holding the last P2POps.
func (s *sim) gpipe(it, m int, ins []*inst) {
	var ops hold
	works := make([]hold, m)
	for j := 0; j < m; j++ {
		s.drop(&ops)
		out := s.ppForward(it, j, ins)
		s.let(&ops, out)
		s.let(&works[j], out)
	}
	for j := range works {
		s.drop(&works[j])
	}
	for j := 0; j < m; j++ {
		s.drop(&ops)
		g := s.ppBackward(it, j)
		s.let(&ops, g)
		s.dropAll(g)
		s.let(&works[j], g)
	}
	for j := range works {
		s.drop(&works[j])
	}
	s.drop(&ops)
}

// oneFOneB is Schedule1F1B: min(m, pp − stage) forwards of warm-up, the
// last one's send fused with the first backward's receive; then one
// backward and one forward in turn, each backward's send fused with the
// next forward's receive; then the remaining backwards. fwdSends and
// bwdSends are the P2POp lists the loop keeps between iterations,
// sendWork the Work it waits on later.
func (s *sim) oneFOneB(it, m int, ins []*inst) {
	p := s.pp
	warm := min(m, int(p.stages-p.stage))
	var sendWork, fwdSends, bwdSends hold
	f, b := 0, 0
	for ; f < warm; f++ {
		out := s.ppForward(it, f, ins)
		s.drop(&sendWork)
		s.let(&fwdSends, out)
		if f != warm-1 {
			s.let(&sendWork, out)
		}
	}
	st := s.startSteady()
	for {
		if n := st.begin(f, m); n > 0 {
			s.jump(b, f, n)
			b, f = b+n, f+n
		}
		// fwd_sends and bwd_recvs fired and waited together.
		g := s.ppBackward(it, b)
		s.let(&bwdSends, g)
		s.dropAll(g)
		b++
		if f == m {
			break
		}
		// bwd_sends and fwd_recvs fired and waited together.
		out := s.ppForward(it, f, ins)
		s.let(&fwdSends, out)
		f++
	}
	st.stop()
	s.let(&sendWork, bwdSends)
	for ; b < m; b++ {
		g := s.ppBackward(it, b)
		s.drop(&sendWork)
		s.let(&bwdSends, g)
		s.dropAll(g)
		s.let(&sendWork, g)
	}
	s.drop(&sendWork)
	s.drop(&fwdSends)
	s.drop(&bwdSends)
}

// interleaved is ScheduleInterleaved1F1B as _PipelineScheduleRuntime runs
// it: the rank's compute actions in order (model.InterleavedOrder), each on
// its stage. Every send's Work is kept in send_ops, with the tensor it
// sends (a stage's output, a stage input's gradient), until the end of
// step() waits on them, the last first; the receives fill the stages'
// receive buffers.
func (s *sim) interleaved(it int) {
	p := s.pp
	byStage := map[int64]*pipeline{}
	for _, q := range p.local {
		byStage[q.stage] = q
	}
	var sends []hold
	for _, a := range p.order {
		q := byStage[a.Stage]
		s.pp = q
		if q.ddp != nil {
			// Each stage module's own DDP (ddp.go): its backward records
			// its gradients' order, its first forward of the second step
			// rebuilds its buckets.
			s.ddp = q.ddp
			if it == 1 && !a.Backward {
				s.ddpRebuild()
			}
		}
		var h hold
		if a.Backward {
			g := s.ppBackward(it, int(a.MB))
			s.let(&h, g)
			s.dropAll(g)
		} else {
			s.let(&h, s.ppForward(it, int(a.MB), q.ins))
		}
		if len(h) > 0 {
			sends = append(sends, h)
		}
	}
	for i := len(sends) - 1; i >= 0; i-- {
		s.drop(&sends[i])
	}
	s.pp = p
	if p.ddp != nil {
		s.ddp = p.ddp
	}
}

// stepEnd is the end of step(): with FSDP, _post_backward reduce-scatters
// the whole gradients and reshards; the last stage merges its output
// chunks (merge_chunks concatenates them along the batch), which the
// caller drops; leaving the autocast region drops its weight casts.
func (s *sim) stepEnd() {
	switch {
	case s.noSync && s.perParam:
		s.fsdpPostStep() // fsdp.go
	case s.noSync:
		whole := make([]*tensor, len(s.params))
		for i, q := range s.params {
			whole[i], q.pgrad = q.pgrad, nil
		}
		for i, q := range s.params {
			if whole[i] != nil {
				s.reduceScatter(q, whole[i])
			}
		}
		s.releaseGathered()
	}
	for _, q := range s.pp.local {
		if q.last() && len(q.chunks) > 0 {
			var n int64
			for _, c := range q.chunks {
				n += c.elems
			}
			s.unref(s.alloc(n, q.chunks[0].dt, catTemp, "merged output chunks"))
		}
	}
	s.clearCache()
	for _, q := range s.pp.local {
		q.casts, q.nodeOf = nil, nil
	}
}

package estimate

import (
	"fmt"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// maxSteps is the most optimizer steps train simulates where the states
// at the steps' ends are not compared (stepsComparable).
const maxSteps = 3

// train simulates optimizer steps until one ends in the state the step
// before it ended in (the same blocks in the same places, the same bytes
// alive by category): every later step runs the same program from the same
// state, so it repeats that step exactly and cannot reserve more. At least
// two: Adam's state exists only from the first step on, so the second is
// the first of the steady program. DDP runs at least three: it rebuilds
// its gradient buckets at the second step's forward (ddp.go), so the third
// is the first that starts as every later one does (measured: Llama-3.2-1B
// with bucket views maps a 2,004 MiB segment in the third step,
// docs/multigpu.md). A cache can keep changing after the second step:
// ViT-B/16's checkpointed bf16 line maps 73 MiB more in PyTorch's third
// step, as in memplan's (docs/allocator.md §8). The steps after the first
// of the steady program replay its allocator calls (replay.go). Each step
// runs up to two micro-batches of gradient accumulation (the second runs
// with gradients already allocated).
//
// Where the states cannot be compared exactly (allocator settings, a cap,
// a trace) or the run leaks (foldLeak), the old rule holds: two steps, a
// third under max_split_size_mb or DDP, and one more while the cache
// grows, up to maxSteps; a cache that grows in the last step is said in
// the notes.
func (s *sim) train(spec *model.Spec, ins []*inst) {
	data := s.batchData(spec)
	steps, least := 2, 2
	if a := s.al.a; a != nil && a.Config().MaxSplitSize > 0 {
		steps = maxSteps
	}
	if s.ddp != nil {
		// DDP rebuilds its buckets at the second step's forward (ddp.go),
		// so the third is the first that starts as every later one does.
		steps, least = maxSteps, maxSteps
	}
	exact := s.stepsComparable()
	most := maxExactSteps
	if n := spec.Training.Steps; n > 0 {
		most = max(least, min(most, int(n))) // a shorter run (--steps)
	}
	l := stepLogs.Get().(*stepLog)
	defer stepLogs.Put(l)
	replay := false
	for it, more := 0, true; more; it++ {
		start := s.al.reserved
		if replay {
			s.replayStep(l, it)
		} else {
			record := exact && replaySkip && s.trace == nil && s.leaked == 0 && it == least-1
			held := s.al.allocated
			if record {
				s.startLog(l)
			}
			s.trainStep(spec, ins, data, it)
			if record {
				// A step that ends holding more or less than it began
				// with made or dropped something for good, which the
				// next step's program would not do again.
				replay = s.stopLog() && s.al.allocated == held
			}
		}
		grew := s.al.reserved > start
		if exact && s.leaked == 0 {
			l.now = s.stepPrint(l.now[:0])
			changed := it == 0 || !equal(l.now, l.prev)
			l.prev, l.now = l.now, l.prev
			more = it+1 < least || changed && it+1 < most
		} else {
			more = it+1 < least || it+1 < steps && grew
		}
		if grew && !more && it+1 >= maxSteps && it+1 != int(spec.Training.Steps) {
			doc := "docs/allocator.md §8"
			if a := s.al.a; a != nil && a.Config().MaxSplitSize > 0 {
				doc = "docs/moe.md §2.2"
			} else if s.ddp != nil && !exact {
				doc = "docs/multigpu.md, DDP's bucket rebuild"
			}
			s.note(fmt.Sprintf("the allocator's cache still grows in step %d (%s more reserved): "+
				"a longer run may reserve more, up to the device's memory, where PyTorch frees cached blocks and retries (%s)",
				it+1, units.Format(s.al.reserved-start), doc))
		}
	}
}

// trainStep simulates optimizer step it: its micro-batches' forward and
// backward, then the optimizer.
func (s *sim) trainStep(spec *model.Spec, ins []*inst, data *tensor, it int) {
	t := spec.Training
	for m := 0; m < int(min(t.GradAccum, 2)); m++ {
		s.enter(it, m, StageForward)
		s.thread = 0
		if it == 1 && m == 0 || it == 0 && m == 1 {
			s.ddpRebuild() // the first forward after the first backward
		}
		s.saving = true
		if s.cpRope != nil {
			s.cpEnter() // context_parallel's copies (contextparallel.go)
		}
		s.gather()
		x := s.ref(data)
		out, sh := s.run(ins, x, spec.InputShape())
		loss := out
		if len(sh) != 1 || sh[0] != 1 {
			// Models without an lm_head end in logits: the loop applies
			// F.cross_entropy and keeps only the loss.
			s.lossAfterAutocast()
			loss = s.crossEntropy(out, s.rows(sh))
			s.unref(out)
		}
		s.rootPostForward() // fsdp.go
		s.clearCache()
		s.endForward()
		s.saved = s.live[catSaved]
		if s.rec != nil {
			s.rec.log(evSaved, 0)
		}

		s.enter(it, m, StageBackward)
		s.thread = 1
		tape := s.tape
		s.tape = nil
		loss.grad = s.alloc(1, f32, catTemp, "loss grad")
		if s.perParam {
			if s.curUnit == outsideUnit {
				s.bwdUnit = outsideUnit // the root's pre-backward after the loss's (fsdpBackwardAt)
			} else {
				s.preBackward(s.units[0]) // the root's (fsdp.go)
			}
			s.curUnit = 0
		}
		s.backward(tape)
		if len(s.tape) == 0 {
			s.tape = tape[:0] // the next forward reuses the tape's memory
		}
		s.unref(loss)
		// Rotary tables the layers made themselves (ropeTables, without
		// cfg.modelRope); the model forward's own went as it returned
		// (dropBodyHold), held since by the nodes and frames that keep them.
		for i, r := range s.ropeT {
			s.unref(r)
			s.ropeT[i] = nil
		}
		if s.cpRope != nil {
			s.cpExit()
		}
		s.dropMasks()
		s.releaseGathered()
		if it == 0 && m == 1 {
			s.ddpSettleMidStep()
		}
	}
	s.stepOptimizer(t, it)
}

// stepOptimizer is the loop's optimizer.step() and zero_grad(): the
// optimizer's state (first iteration) and temporaries, then the gradients
// dropped unless they are zeroed in place.
func (s *sim) stepOptimizer(t model.Training, it int) {
	s.enter(it, 0, StageOptimizer)
	s.thread = 0
	s.optimizerStep(t.Optimizer, it == 0)
	if t.ZeroGrad == model.ZeroGradNone {
		for _, p := range s.params {
			s.unref(p.pgrad)
			p.pgrad = nil
		}
		s.releaseWholeGrads() // tensorparallel.go
	}
}

// batchData allocates the input batch the way a training loop holds it:
// token ids and labels (int64), or float inputs and int64 labels. Float
// inputs arrive in fp32; under pure bf16 the loop casts them on the device
// (`x.cuda().bfloat16()`, as bench/torch/measure.py does), so the fp32 batch
// lives until the cast returns.
func (s *sim) batchData(spec *model.Spec) *tensor {
	b := spec.Training.Batch
	in := spec.InputShape()
	if spec.Model.TokenInput() {
		s.alloc(b*in[0], i64, catData, "labels")
		return s.alloc(b*in[0], i64, catData, "input ids")
	}
	dt := int64(f32)
	if spec.Training.Precision == model.BF16 {
		dt = half
		st := s.alloc(b*in.Elems(), f32, catData, "staging")
		x := s.alloc(b*in.Elems(), dt, catData, "inputs")
		s.unref(st)
		s.alloc(b, i64, catData, "labels")
		return x
	}
	s.alloc(b, i64, catData, "labels")
	return s.alloc(b*in.Elems(), dt, catData, "inputs")
}

// optimizerStep allocates the optimizer's state on the first step and the
// temporaries of its update (docs/formulas.md §C).
func (s *sim) optimizerStep(o model.Optimizer, first bool) {
	if s.cfg.zero >= 1 && s.cfg.offload != model.OffloadNone {
		return // state and step on the host (ZeRO-Offload)
	}
	params := s.params
	if s.cfg.zero >= 1 {
		// ZeRO-1 and up: each rank keeps and updates its shard.
		params = s.shards()
	}
	state := func(elems, dt int64) {
		s.alloc(elems, dt, catOptState, "optimizer state")
	}
	switch o.Name {
	case model.Adam, model.AdamW:
		s.adamStep(o, params, first)
	case model.SGDMomentum:
		if first {
			for _, p := range params {
				state(p.elems, p.dt) // momentum_buffer = clone(grad)
			}
		}
	case model.Adafactor:
		for _, p := range params {
			if first {
				r, c := factor(p)
				if c == 0 {
					state(p.elems, p.dt)
				} else {
					state(r, p.dt)
					state(c, p.dt)
				}
			}
			// var_estimate = row_var @ col_var: one parameter-sized temporary.
			t := s.alloc(p.elems, p.dt, catTemp, "var_estimate")
			s.unref(t)
		}
	case model.Adam8bit, model.PagedAdamW8bit, model.PagedAdamW32bit:
		s.bnbStep(o, params, first) // bitsandbytes (bnbopt.go)
	}
}

// adamStep is Adam and AdamW: two moments per parameter, created on the
// first step, and the temporaries of the implementation's update. A
// tensor-parallel rank whose parameters are not all DTensors (markPlain)
// and are not sharded by FSDP steps two parameter groups, the DTensors
// first, as bench/torch/dist's tp.py builds them: Adam.step initialises
// and updates one group before the next, so the first group's
// temporaries are gone when the second's state is made (measured:
// bench/results/2026-11-27-h200x4-tp-hf/).
func (s *sim) adamStep(o model.Optimizer, params []*tensor, first bool) {
	if !s.dtensor || s.cfg.zero > 0 {
		s.adamGroup(o, params, first, true)
		return
	}
	dt, plain := s.slab.ptrs(len(params)), s.slab.ptrs(len(params))
	for _, p := range params {
		if p.plain {
			plain = append(plain, p)
		} else {
			dt = append(dt, p)
		}
	}
	if len(dt) > 0 {
		s.adamGroup(o, dt, first, true)
	}
	if len(plain) > 0 {
		s.adamGroup(o, plain, first, false)
	}
}

// adamGroup is one call of Adam's update over params, a parameter group:
// its state on the first step, then the update's temporaries; dtensors
// says that the group holds the DTensors whose whole gradients are
// redistributed to shards (shardWholeGrads).
func (s *sim) adamGroup(o model.Optimizer, params []*tensor, first, dtensors bool) {
	if first {
		for _, p := range params {
			s.alloc(p.elems, p.dt, catOptState, "optimizer state") // exp_avg
			s.alloc(p.elems, p.dt, catOptState, "optimizer state") // exp_avg_sq
			if o.Impl == model.ImplFused {
				s.alloc(1, f32, catOptState, "optimizer state") // step lives on the device when fused
			}
		}
	}
	if o.Impl == model.ImplForeach && dtensors {
		s.shardWholeGrads() // tensorparallel.go
	}
	switch o.Impl {
	case model.ImplForeach:
		// exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one list
		// the size of all parameters, held at once.
		tmp := s.slab.ptrs(len(params))
		for _, p := range params {
			tmp = append(tmp, s.alloc(p.elems, p.dt, catTemp, "foreach sqrt"))
		}
		// The list dies when _multi_tensor_adam returns, and CPython's
		// list_dealloc drops its items from the last to the first
		// (docs/pytorch-memory.md §4, order of allocations and frees).
		for i := len(tmp) - 1; i >= 0; i-- {
			s.unref(tmp[i])
		}
	case model.ImplForLoop:
		// denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
		for _, p := range params {
			a := s.alloc(p.elems, p.dt, catTemp, "sqrt")
			b := s.alloc(p.elems, p.dt, catTemp, "denom")
			s.unref(a)
			s.unref(b)
		}
	}
}

// factor returns Adafactor's row and column state sizes for a parameter:
// row_var has the shape of the gradient with the last dimension 1, col_var
// with the second-to-last 1. Vectors (c = 0) keep a full variance.
func factor(p *tensor) (r, c int64) {
	if p.second == 0 {
		return p.elems, 0
	}
	return p.elems / p.last, p.elems / p.second
}

// enter begins a phase (stage of a micro-batch of an optimizer step), whose
// peaks observe records; each backward counts a pass.
func (s *sim) enter(iter, micro int, stage string) {
	if stage == StageBackward {
		s.passes++
	}
	s.phase = Phase{Iteration: iter, Micro: micro, Stage: stage}
	if s.rec != nil {
		s.rec.logEnter(micro, stage)
	}
	s.phases = append(s.phases, PhasePeak{Phase: s.phase, PeakAllocated: s.al.allocated, PeakReserved: s.al.reserved})
}

// lossAfterAutocast is where a loop that computes the loss outside its
// autocast region (model.Training.LossOutsideAutocast) leaves the region:
// between the logits and the loss, the cached casts go. Such a loss is
// outside the model too, so FSDP2's root post-forward has run by then:
// the last all-gather output is freed before the loss's logits copies are
// made (measured: the last block's 236 MiB output freed among autocast's
// casts, before the loss, bench/results/2026-11-28-h200x4-heldout54-traces
// c6; the step's later call finds nothing left to do).
func (s *sim) lossAfterAutocast() {
	if s.cfg.lossOutside {
		s.clearCache()
		s.rootPostForward()
		if s.perParam {
			// The loss is the loop's, outside the model and so outside
			// FSDP2's root: its nodes run in backward before the root's
			// pre-backward hook, which fires once the gradient of the
			// model's output (the logits) exists (fsdpBackwardAt).
			s.curUnit = outsideUnit
		}
	}
}

// clearCache drops autocast's cached weight casts, as leaving the
// outermost autocast region does.
func (s *sim) clearCache() {
	for _, c := range s.cache {
		s.unref(c)
	}
	clear(s.cache)
}

// observe records the allocator's state in the peaks: the simulation's
// and the current phase's.
func (s *sim) observe() {
	a := s.al.allocated
	if a > s.peak.allocated {
		s.peak.allocated, s.peak.at, s.peak.live = a, s.phase, s.live
	}
	if s.al.reserved > s.peak.reserved {
		s.peak.reserved = s.al.reserved
	}
	if n := len(s.phases); n > 0 {
		p := &s.phases[n-1]
		p.PeakAllocated = max(p.PeakAllocated, a)
		p.PeakReserved = max(p.PeakReserved, s.al.reserved)
	}
}

// maxExactSteps bounds the steps simulated while each ends in a state the
// step before did not: a cache that still changes then is said in the
// notes as one that grows.
const maxExactSteps = 6

// stepsComparable says whether states at the ends of steps can be compared
// exactly (as the pipeline's steady state compares iterations): default
// allocator settings, whose statistics depend on nothing but the layout,
// and no cap, under which the out-of-memory path depends on history. A
// traced simulation keeps the old rule too: the tests that trace count
// the events of two steps, and the debugging traces (TestTraceDebug) are
// set beside real histories' first steps.
func (s *sim) stepsComparable() bool {
	a := s.al.a
	return (s.trace == nil || s.traceSteps) && s.al.limit == 0 && a != nil && a.Config().IsDefault()
}

// stepPrint is the state at a step's end: the bytes alive by category and
// the allocator's layout, each allocated block marked alike.
func (s *sim) stepPrint(dst []int64) []int64 {
	dst = append(dst, s.live[:]...)
	return s.al.a.AppendLayout(dst, func(block) int64 { return 1 })
}

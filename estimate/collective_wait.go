package estimate

import (
	"fmt"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// Functional collectives that a checkpoint's recompute leaves unwaited.
//
// DTensor's collectives are torch's functional collectives: each output is
// an AsyncCollectiveTensor whose work c10d keeps in a registry, with the
// output, until something reads the tensor (which waits on it). A
// checkpointed segment's recompute stops as soon as it has saved what the
// first forward saved (earlyStop), by raising out of the forward: an output
// made before the stop and not read by then is never waited, and the
// registry keeps it for good. In Cohere's parallel block under tensor
// parallelism the attention's reduced output waits for the sum after the
// MLP, which the stop never reaches: one such output per block and step
// (measured: cohere-1b-shape at tp 2, sp, checkpointed, 16 × 16 MiB more
// reserved in each step, never freed;
// bench/results/2026-11-27-h200x2-tp-families/cohere-tp2-b2-ckpt-rank0.json.gz).

// markUnwaited notes y, a functional collective's output, when a recompute
// made it.
func (s *sim) markUnwaited(y *tensor) {
	if s.stop.limit == 0 || s.stop.stopped {
		return
	}
	y.unwaited = true
	s.unwaited = append(s.unwaited, y)
}

// leakUnwaited keeps for good the recompute's collective outputs no op has
// read when it stops (tensor.unwaited), and counts the first step's.
func (s *sim) leakUnwaited() {
	for _, t := range s.unwaited {
		if t.unwaited && t.refs > 0 {
			t.unwaited = false
			s.ref(t) // the registry's reference, never dropped
			if s.phase.Iteration == 0 {
				s.leaked += t.bytes()
			}
		}
	}
	s.unwaited = s.unwaited[:0]
}

// waitAll forgets the recompute's unread collective outputs once it has
// run to its end: the script's later reads wait on them.
func (s *sim) waitAll() {
	for _, t := range s.unwaited {
		t.unwaited = false
	}
	s.unwaited = s.unwaited[:0]
}

// foldLeak makes r's figures the run's last step's where the run leaks
// (leakUnwaited): the simulated figures are the second step's, and each
// later step allocates s.leaked more for good, so a run of steps steps
// (the training's, or model.LongRunSteps when it does not say) holds
// (steps − 2) · s.leaked more allocated memory at its end, an item of the
// memory at the peak. The leaked blocks take the cache's free space
// first: reserved memory grows only once the allocated peak reaches it
// (measured over six steps: allocated 256 MiB higher after each, reserved
// flat with the second step's 5.2 GiB cached beside it;
// bench/results/2026-11-27-h200x2-tp-families/cohere-6steps.jsonl). It
// records the leak in r and notes it, with the step during which the
// device of memory bytes fills.
func (s *sim) foldLeak(r *Result, steps, memory int64) {
	if s.leaked == 0 {
		return
	}
	given := steps > 0
	if !given {
		steps = model.LongRunSteps
	}
	a2, r2, outside := r.PeakAllocated, r.PeakReserved, r.DeviceTotal-r.PeakReserved
	extra := max(steps-2, 0) * s.leaked
	r.LeakPerStep, r.LeakSteps = s.leaked, steps
	r.PeakAllocated = a2 + extra
	r.PeakReserved = max(r2, r.PeakAllocated)
	r.DeviceTotal = r.PeakReserved + outside
	if extra > 0 {
		r.AtPeak = append(r.AtPeak, Item{fmt.Sprintf("leaked collective outputs (%d steps)", steps), extra})
	}
	length := fmt.Sprintf("a run of %d steps", steps)
	if !given {
		length = fmt.Sprintf("a long run (%d steps; --steps for another length)", steps)
	}
	fills := ""
	if r2+outside <= memory {
		// Step k allocates a2 + (k − 2)·leaked at its peak; the device
		// fills once that and what is outside the allocator pass it.
		fills = fmt.Sprintf("; the device fills during step %d", 3+(memory-outside-a2)/s.leaked)
	}
	s.note(fmt.Sprintf("a checkpointed segment's recompute stops before it reads %s of tensor-parallel collective outputs per step (Cohere's parallel block: the attention's reduced output waits for the sum after the MLP); c10d keeps unwaited collectives, so the run holds that much more after every step, without bound (docs/parallelism.md §3.1.6): the figures are the last step's of %s, %s more allocated than the second step's%s",
		units.Format(s.leaked), length, units.Format(extra), fills))
}

package estimate

import (
	"fmt"

	"github.com/memplan/memplan/internal/units"
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

// leakNote says how much the run leaks per step, if anything.
func (s *sim) leakNote() {
	if s.leaked > 0 {
		s.note(fmt.Sprintf("a checkpointed segment's recompute stops before it reads %s of tensor-parallel collective outputs per step (Cohere's parallel block: the attention's reduced output waits for the sum after the MLP); c10d keeps unwaited collectives, so the run holds that much more after every step, without bound (docs/parallelism.md §3.1.6); the figures are the second step's", units.Format(s.leaked)))
	}
}

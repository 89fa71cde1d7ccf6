package model

import "strconv"

// MaxStepPause bounds step_pause (an hour).
const MaxStepPause = 3600

// LongRunSteps is the run's length when the spec and the command line do
// not give steps: a run that leaks memory every step is judged at its
// end, and a training run is long. Only a leak reads it.
const LongRunSteps = 1000

// decodeLoop reads what the spec says about the training loop's shape:
// loss_outside_autocast (with --loss-outside-autocast),
// empty_cache_after_wrap (with --empty-cache-after-wrap) and step_pause, the
// seconds the training loop waits, once its first optimizer step has
// finished on the GPU, before the next forward (a pause after every step,
// such as nvidia-smi or a checkpoint, counts too), with --step-pause. The
// estimator reads the pause only for DDP's bucket rebuild
// (docs/multigpu.md, "DDP's bucket rebuild race"). steps (--steps) is the
// run's optimizer steps, which only a leak reads (Training.Steps).
func decodeLoop(e *errs, tm *mapping, t *Training, o Overrides) {
	tm.int("steps", &t.Steps, false)
	switch {
	case o.Steps < 0:
		e.add(0, "--steps: want a count of optimizer steps, got %d", o.Steps)
	case o.Steps > 0:
		t.Steps = o.Steps
	}
	tm.bool("loss_outside_autocast", &t.LossOutsideAutocast)
	t.LossOutsideAutocast = t.LossOutsideAutocast || o.LossOutsideAutocast
	tm.bool("empty_cache_after_wrap", &t.EmptyCacheAfterWrap)
	t.EmptyCacheAfterWrap = t.EmptyCacheAfterWrap || o.EmptyCacheAfterWrap
	tm.float("step_pause", &t.StepPause, 0, MaxStepPause)
	if o.StepPause == "" {
		return
	}
	f, err := strconv.ParseFloat(o.StepPause, 64)
	if err != nil || !(f >= 0 && f <= MaxStepPause) {
		e.add(0, "--step-pause: want seconds between 0 and %d, got %q", MaxStepPause, o.StepPause)
		return
	}
	t.StepPause = f
}

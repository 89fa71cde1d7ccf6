package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestLossOutsideAutocast checks where a loop that computes the loss after
// leaving autocast (model.Training.LossOutsideAutocast) frees autocast's
// cached half copies of the weights: before the loss's log-softmax, which
// then finds fewer bytes allocated than with the loss inside the region
// (the default), where they live until the forward ends: exactly the
// copies nothing but the cache holds (under checkpointing the segments'
// nodes save none; the others are saved for backward and stay). For the
// head of a transformers model (Llama-3.2-1B), the vocabulary-parallel
// head of tensor parallelism, and a model that ends in logits, whose loss
// the loop applies (the MLP).
func TestLossOutsideAutocast(t *testing.T) {
	for _, tc := range []struct {
		file string
		o    model.Overrides
	}{
		{"llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 512, Precision: "amp-bf16", Checkpointing: "every-block"}},
		{"llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 512, Precision: "amp-bf16", Checkpointing: "every-block", TP: 2, SP: true}},
		{"mlp.yaml", model.Overrides{Batch: 8, Precision: "amp-bf16"}},
	} {
		// at is the bytes allocated, and those of the cached casts only
		// the cache holds, when the first forward's log-softmax is
		// allocated.
		at := func(outside bool) (allocated, casts int64) {
			o := tc.o
			o.LossOutsideAutocast = outside
			done := false
			_, err := estimateWith(load(t, tc.file, o), nil, func(sm *sim) {
				sm.trace = func(x *tensor, alloc bool) {
					if !alloc || done || sm.phase.Stage != StageForward || x.label() != "LogSoftmax" {
						return
					}
					done = true
					allocated = sm.al.allocated - x.bytes()
					for _, c := range sm.cache {
						if c.refs == 1 {
							casts += (c.bytes() + 511) / 512 * 512 // the allocator's rounding
						}
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if !done {
				t.Fatalf("%s: no log-softmax in the forward", tc.file)
			}
			return allocated, casts
		}
		in, casts := at(false)
		out, left := at(true)
		if casts == 0 || left != 0 {
			t.Errorf("%s %s: casts cached at the loss %d B inside autocast, %d B outside; want some, then none", tc.file, tc.o.Checkpointing, casts, left)
			continue
		}
		if in-out != casts {
			t.Errorf("%s %s: allocated at the loss %d B inside, %d B outside: %d B apart, want the casts' %d B", tc.file, tc.o.Checkpointing, in, out, in-out, casts)
		}
	}
}

// TestStepsUntilRepeat: the steps go on until one ends in the state the
// step before it ended in (Llama-3.2-1B in fp32 at 1 × 2,048 on an H100:
// its cache grows in the third step, which the fourth repeats), and a run
// said to be shorter (Training.Steps) is simulated for its own steps only,
// two at least.
func TestStepsUntilRepeat(t *testing.T) {
	run := func(steps int64) (reserved int64, simulated int) {
		r, err := Estimate(load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 2048, Precision: model.FP32,
			Dev: "h100-80gb", Steps: steps}))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Phases {
			simulated = max(simulated, p.Iteration+1)
		}
		return r.PeakReserved, simulated
	}
	long, n := run(0)
	if n != 4 {
		t.Errorf("a long run: %d steps simulated, want 4 (growth in the third, repeated by the fourth)", n)
	}
	for _, tc := range []struct {
		steps  int64
		want   int
		growth bool // reserved as the long run's
	}{{1, 2, false}, {2, 2, false}, {3, 3, true}, {10, 4, true}} {
		res, n := run(tc.steps)
		if n != tc.want || (res == long) != tc.growth {
			t.Errorf("--steps %d: %d steps simulated, reserved %d (long run %d); want %d steps, the long run's reserve %v",
				tc.steps, n, res, long, tc.want, tc.growth)
		}
	}
}

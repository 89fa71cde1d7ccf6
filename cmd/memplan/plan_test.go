package main

import (
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
)

// TestPlanHints: the rebuild-race hint is printed for DDP and ZeRO-1
// layouts a pause would settle, not for those that accumulate gradients
// outside a pipeline (they rebuild inside their first step, where no pause
// helps: estimate.MayRace), nor for a loop said to pause; the pipeline hint
// only when a pipeline layout is listed; the wrapping's hint for FSDP2
// layouts over a model built on the host whose script keeps the cache.
func TestPlanHints(t *testing.T) {
	spec, err := model.Load("../../specs/llama-3.2-1b.yaml", model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	paused := *spec
	paused.Training.StepPause = 0.2
	ddp := planner.Layout{DP: 4, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 2, Accum: 1}
	accum := ddp
	accum.Micro, accum.Accum = 1, 2
	pipe := planner.Layout{DP: 2, TP: 1, PP: 2, CP: 1, EP: 1, Micro: 1, Accum: 4, Schedule: planner.OneFOneB, Zero: 2}
	fsdp := ddp
	fsdp.Zero = 3
	emptied, meta := *spec, *spec
	emptied.Training.EmptyCacheAfterWrap = true
	meta.Training.FSDPInit = model.FSDPInitMeta
	for _, tc := range []struct {
		name             string
		spec             *model.Spec
		layouts          []planner.Layout
		race, pipe, wrap bool
	}{
		{"DDP", spec, []planner.Layout{ddp}, true, false, false},
		{"DDP that pauses", &paused, []planner.Layout{ddp}, false, false, false},
		{"DDP accumulating", spec, []planner.Layout{accum}, false, false, false},
		{"pipeline", spec, []planner.Layout{pipe}, false, true, false},
		{"FSDP2", spec, []planner.Layout{fsdp}, false, false, true},
		{"FSDP2 emptying the cache", &emptied, []planner.Layout{fsdp}, false, false, false},
		{"FSDP2 on meta", &meta, []planner.Layout{fsdp}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &planner.Result{}
			for _, l := range tc.layouts {
				r.Layouts = append(r.Layouts, planner.Candidate{Layout: l})
			}
			var b strings.Builder
			printRaceHint(&b, tc.spec, r)
			printPipelineHint(&b, r)
			printWrapHint(&b, tc.spec, r)
			if got := strings.Contains(b.String(), "--empty-cache-after-wrap"); got != tc.wrap {
				t.Errorf("wrapping hint printed %v, want %v:\n%s", got, tc.wrap, b.String())
			}
			if got := strings.Contains(b.String(), "--step-pause"); got != tc.race {
				t.Errorf("race hint printed %v, want %v:\n%s", got, tc.race, b.String())
			}
			if got := strings.Contains(b.String(), "pipeline layouts above"); got != tc.pipe {
				t.Errorf("pipeline hint printed %v, want %v:\n%s", got, tc.pipe, b.String())
			}
		})
	}
}

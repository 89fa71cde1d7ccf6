package estimate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestStagesConcurrent: simulating a pipeline's stages at once gives what
// simulating them one after the other gives, figure for figure, and the
// first failing stage's error either way (run it under -race too).
func TestStagesConcurrent(t *testing.T) {
	for _, o := range []model.Overrides{
		{PP: 4, GradAccum: 8, Seq: 512, DP: 2, Zero: "0"},
		{PP: 4, GradAccum: 8, Seq: 512, DP: 2, Zero: "2", Checkpointing: model.CkptBlock},
		{PP: 3, GradAccum: 6, Seq: 512, TP: 2, SP: true},
		{PP: 2, PPSchedule: model.PPInterleaved, PPVirtual: 2, GradAccum: 4, Seq: 512},
	} {
		spec := load(t, "tinyllama-1.1b.yaml", o)
		one, err := simulateStages(spec, nil, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		many, err := simulateStages(spec, nil, nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(one)
		b, _ := json.Marshal(many)
		if string(a) != string(b) {
			t.Errorf("pp %d: stages simulated three at a time differ from one at a time", o.PP)
		}
	}
	// A stage that cannot be lowered: the error names it whichever way.
	spec := load(t, "tinyllama-1.1b.yaml", model.Overrides{PP: 4, GradAccum: 30})
	spec.Training.PP = 30 // past model.Load's check: more stages than layers
	for _, w := range []int{1, 3} {
		_, err := simulateStages(spec, nil, nil, w)
		if err == nil || !strings.HasPrefix(err.Error(), "pipeline stage 0: ") {
			t.Errorf("%d workers: 30 stages of 22 layers gave %v, want stage 0's error", w, err)
		}
	}
}

package planner

import (
	"reflect"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestCanonical: every layout Simulator.Canonical maps to another (a ZeRO-3
// pipeline to its ZeRO-2 twin) gets the same answer from the simulator,
// every kind of rank alike, over pipelines of every schedule with and
// without tensor or context parallelism, checkpointing and precisions.
func TestCanonical(t *testing.T) {
	llama := load(t, "llama-3.2-1b.yaml")
	llama.Training.Seq = 1024
	every, none := model.Checkpointing{Mode: model.CkptBlock}, model.Checkpointing{Mode: model.CkptNone}
	for _, prec := range []string{model.AMPBF16, model.BF16} {
		spec := *llama
		spec.Training.Precision = prec
		for _, l := range []Layout{
			{DP: 2, TP: 1, PP: 2, CP: 1, EP: 1, Zero: 3, Schedule: OneFOneB, Checkpointing: none, Micro: 1, Accum: 4},
			{DP: 2, TP: 2, PP: 2, CP: 1, EP: 1, Zero: 3, SP: true, LossParallel: true, Schedule: OneFOneB, Checkpointing: every, Micro: 2, Accum: 2},
			{DP: 2, TP: 1, PP: 2, CP: 1, EP: 1, Zero: 3, Schedule: GPipe, Checkpointing: none, Micro: 1, Accum: 3},
			{DP: 1, TP: 1, PP: 2, CP: 2, EP: 1, Zero: 3, Schedule: OneFOneB, Checkpointing: every, Micro: 1, Accum: 2},
		} {
			c := Simulator{}.Canonical(l)
			if c == l {
				t.Fatalf("%s: not mapped", l)
			}
			t.Run(prec+"/"+l.String(), func(t *testing.T) {
				if err := Validate(&spec, l); err != nil {
					t.Fatal(err)
				}
				a, errA := Simulator{}.Estimate(&spec, l)
				b, errB := Simulator{}.Estimate(&spec, c)
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s: %+v\n%s: %+v", l, a, c, b)
				}
			})
		}
	}
	if l := (Layout{DP: 2, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 3, Checkpointing: none, Micro: 1, Accum: 1}); (Simulator{}).Canonical(l) != l {
		t.Errorf("%s: mapped without a pipeline", l)
	}
}

package estimate

import (
	"encoding/json"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestStopAbove: a simulation asked to stop above a device total
// (Options.StopAbove) gives Estimate's result, figure for figure, when the
// run stays at or under it; when it stops, its device total is above the
// level and no more than the whole run's, and it says it does not fit;
// and it always stops when the whole run's reserved memory alone is above
// the level. Over one GPU, data parallelism (ZeRO 1's ranks, FSDP's
// streams), tensor, pipeline (1F1B and interleaved, every stage at once),
// context and expert parallelism (every kind of rank).
func TestStopAbove(t *testing.T) {
	for _, c := range []struct {
		name string
		spec *model.Spec
	}{
		{"gpt2", load(t, "gpt2-124m.yaml", model.Overrides{})},
		{"llama zero1", load(t, "llama-3.2-1b.yaml", model.Overrides{DP: 4, Zero: "1", Seq: 1024})},
		{"llama zero3 ckpt", load(t, "llama-3.2-1b.yaml", model.Overrides{DP: 4, Zero: "3", Seq: 1024, Checkpointing: model.CkptBlock})},
		{"tinyllama tp2 sp", load(t, "tinyllama-1.1b.yaml", model.Overrides{TP: 2, SP: true, Seq: 1024})},
		{"tinyllama pp4 1f1b", load(t, "tinyllama-1.1b.yaml", model.Overrides{PP: 4, GradAccum: 8, Seq: 512, DP: 2, Zero: "2"})},
		{"tinyllama pp4 interleaved", load(t, "tinyllama-1.1b.yaml", model.Overrides{PP: 4, PPSchedule: model.PPInterleaved, PPVirtual: 2, GradAccum: 8, Seq: 512})},
		{"tinyllama cp2", load(t, "tinyllama-1.1b.yaml", model.Overrides{CP: 2, Seq: 4096})},
		{"moe ep2 skewed", moeSpec(t, 32, 4, model.Overrides{DP: 2, EP: 2, EPSkew: "2", Zero: "3", Precision: "bf16"})},
	} {
		full, err := Estimate(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, _ := json.Marshal(full)
		levels := []int64{full.DeviceTotal - 1, full.DeviceTotal, full.DeviceTotal + 1<<30}
		for i := int64(1); i <= 16; i++ {
			levels = append(levels, full.PeakReserved*i/16)
		}
		for _, level := range levels {
			r, err := EstimateOptions(c.spec, Options{StopAbove: level})
			if err != nil {
				t.Fatalf("%s above %d: %v", c.name, level, err)
			}
			if level <= full.PeakReserved && !r.Stopped {
				t.Errorf("%s: reserved %d alone is above %d, but the simulation did not stop", c.name, full.PeakReserved, level)
			}
			if !r.Stopped {
				if got, _ := json.Marshal(r); string(got) != string(want) {
					t.Errorf("%s above %d: not stopped, but the result differs from Estimate's", c.name, level)
				}
				continue
			}
			if r.DeviceTotal <= level || r.DeviceTotal > full.DeviceTotal || r.PeakReserved > full.PeakReserved || r.Fits {
				t.Errorf("%s: stopped above %d at device total %d (reserved %d, fits %v); the whole run has %d (%d)",
					c.name, level, r.DeviceTotal, r.PeakReserved, r.Fits, full.DeviceTotal, full.PeakReserved)
			}
			if level >= full.DeviceTotal {
				t.Errorf("%s: stopped above %d, but the whole run's device total is %d", c.name, level, full.DeviceTotal)
			}
		}
	}
}

package tuner_test

import (
	"fmt"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// Tune finds the largest micro-batch whose predicted device total stays
// under the target band's upper edge, less the safety margin.
func ExampleTune() {
	spec, err := model.Load("testdata/gpt2-124m.yaml", model.Overrides{Dev: "a100-40gb"})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := tuner.Tune(spec, tuner.DefaultBand, tuner.Constraints{Margin: tuner.DefaultMargin}, tuner.Analytic)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("batch %d: %.2f GiB, %.1f%% of %s\n", r.Batch, float64(r.DeviceTotal)/(1<<30), 100*r.Fill, spec.Device.Name)
	// The same rule decides what check says of the next batch.
	spec.Training.Batch = r.Batch + 1
	next, err := tuner.Analytic(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("batch", r.Batch+1, tuner.Fits(next, spec.Device.Memory, tuner.DefaultBand, tuner.DefaultMargin))
	// Output:
	// batch 22: 34.11 GiB, 86.3% of a100-40gb
	// batch 23 above-target
}

// Split turns a global batch into micro-batches and accumulation steps.
func ExampleSplit() {
	p, err := tuner.Split(512, 8, 22)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d GPUs × micro-batch %d × %d steps = %d\n", p.DP, p.MicroBatch, p.Accum, p.Achieved)
	// Output:
	// 8 GPUs × micro-batch 16 × 4 steps = 512
}

// When batch 1 does not fit, Tune lists fixes; with Constraints.Stop each
// fix's estimate ends once it can neither fit nor come closer than the
// closest miss, and the fixes are the same.
func ExampleAnalyticStop() {
	spec, err := model.Load("../specs/llama-3-8b.yaml", model.Overrides{Dev: "h100-80gb"})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := tuner.Constraints{Margin: tuner.DefaultMargin}
	whole, _ := tuner.Tune(spec, tuner.DefaultBand, c, tuner.Analytic)
	c.Stop = tuner.AnalyticStop
	stopped, _ := tuner.Tune(spec, tuner.DefaultBand, c, tuner.Analytic)
	fmt.Println("first fix:", stopped.Fixes[0].Change)
	fmt.Println("the same fixes:", fmt.Sprint(stopped.Fixes) == fmt.Sprint(whole.Fixes))
	// Output:
	// first fix: --zero 3 --offload params --checkpointing every-block
	// the same fixes: true
}

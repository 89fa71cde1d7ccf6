package planner_test

import (
	"fmt"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
)

// Plan Llama-3-8B for a global batch of 256 on exactly 8 GPUs with the
// estimator: the layouts it can simulate today are data parallelism with
// ZeRO and tensor parallelism (Llama).
func ExamplePlan() {
	spec, err := model.Load("../specs/llama-3-8b.yaml", model.Overrides{Seq: 4096})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := planner.Plan(spec, planner.Request{GlobalBatch: 256, GPUs: 8, Top: 2}, planner.Simulator{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range r.Layouts {
		fmt.Printf("%s: %.0f%% of %s\n", c.Name, 100*c.Fill, r.Device)
	}
	// Output:
	// dp2·tp4+sp zero0 loss-parallel mb1×acc128: 78% of h100-80gb
	// dp2·tp4+sp zero1 loss-parallel mb2×acc64: 85% of h100-80gb
}

// Validate says why a layout cannot run a model.
func ExampleValidate() {
	spec, err := model.Load("../specs/llama-3-70b.yaml", model.Overrides{})
	if err != nil {
		fmt.Println(err)
		return
	}
	l := planner.Layout{DP: 4, TP: 16, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1}
	fmt.Println(planner.Validate(spec, l))
	// Output:
	// dp4·tp16 zero0 mb1×acc1: 8 key/value heads are not divisible by tp 16 (Megatron-LM and torchtitan split them, they do not replicate them)
}

// The simulator's lower bound rules a layout out without simulating it:
// Llama-3-70B in bf16 with ZeRO 3 over 8 GPUs needs more than an H100 for
// its model state and Adam's step alone.
func ExampleSimulator_LowerBound() {
	spec, err := model.Load("../specs/llama-3-70b.yaml", model.Overrides{Precision: model.BF16})
	if err != nil {
		fmt.Println(err)
		return
	}
	bound := planner.Simulator{}.LowerBound(spec)
	l := planner.Layout{DP: 8, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 3,
		Checkpointing: model.Checkpointing{Mode: model.CkptBlock}, Micro: 1, Accum: 128}
	_, why := bound(l)
	fmt.Println(why)
	// Output:
	// model state and Adam's foreach step need 82.14 GiB: at least 83.69 GiB on the device
}

// FirstLayout is the one layout to run a job on when data parallelism is
// not enough, or nil when none fits.
func ExampleFirstLayout() {
	spec, err := model.Load("../specs/llama-3-8b.yaml", model.Overrides{Dev: "a100-40gb"})
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := planner.FirstLayout(spec, planner.Request{GlobalBatch: 256})
	if err != nil || c == nil {
		fmt.Println(c, err)
		return
	}
	fmt.Printf("%s on %d GPUs\n", c.Name, c.GPUs)
	// Output:
	// dp2·tp4+sp zero3 loss-parallel ckpt=every-block mb2×acc64 on 8 GPUs
}

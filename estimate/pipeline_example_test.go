package estimate_test

import (
	"fmt"
	"log"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// With pipeline parallelism every stage is simulated: the Result is the
// busiest stage's and Pipeline lists each kind of stage.
func ExamplePipeline() {
	s, err := model.Load("../specs/tinyllama-1.1b.yaml", model.Overrides{
		Batch: 1, Seq: 2048, Precision: "amp-bf16", Optimizer: "adamw-foreach",
		PP: 2, PPSchedule: model.PP1F1B, GradAccum: 8,
	})
	if err != nil {
		log.Fatal(err)
	}
	r, err := estimate.Estimate(s)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range r.Pipeline.Kinds {
		fmt.Printf("%s %d: %d blocks, peak allocated %s\n", k.Kind, k.Stage, k.Blocks, units.Format(k.PeakAllocated))
	}
	fmt.Println("busiest stage:", r.Pipeline.Busiest)
	// Output:
	// first stage 0: 11 blocks, peak allocated 13.90 GiB
	// last stage 1: 11 blocks, peak allocated 13.42 GiB
	// busiest stage: 0
}

package diagnose

import (
	"fmt"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// Prediction is memplan's prediction for the described job.
type Prediction struct {
	Batch         int64 `json:"batch"`
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	PeakReserved  int64 `json:"peak_reserved_bytes"`
	DeviceTotal   int64 `json:"device_total_bytes"`
	DeviceMemory  int64 `json:"device_memory_bytes"`
	// LargestBatch is the tuner's largest batch that fits, 0 if none.
	LargestBatch int64 `json:"largest_batch,omitempty"`
	// Changes are single changes re-estimated at the job's batch; Asked
	// is the same measure for the job as described (the device total, or
	// peak reserved under a memory fraction).
	Changes []Change `json:"changes,omitempty"`
	Asked   int64    `json:"asked_bytes,omitempty"`
}

// Change is a change to the job and its prediction: the device total, or
// peak reserved under a memory fraction (the measure the cap applies to).
type Change struct {
	Change string `json:"change"`
	Bytes  int64  `json:"bytes"`
	Fits   bool   `json:"fits"`
}

// Predict estimates the described job, the largest batch that fits
// (memory fraction cap included, when set) and, when the job does not fit,
// the cheapest single changes that make its batch fit. All of diagnose's
// use of the estimator and the tuner is here.
func Predict(spec *model.Spec, fraction float64) (*Prediction, error) {
	r, err := estimate.Estimate(spec)
	if err != nil {
		return nil, err
	}
	p := &Prediction{Batch: spec.Training.Batch, PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved,
		DeviceTotal: r.DeviceTotal, DeviceMemory: spec.Device.Memory}
	oracle, band := tuner.Analytic, tuner.Band{Lo: 0.85, Hi: 0.95}
	if fraction > 0 {
		oracle, band = tuner.Capped(fraction), tuner.Band{Lo: fraction * 0.9, Hi: fraction}
	}
	if t, err := tuner.Tune(spec, band, tuner.Constraints{Margin: tuner.DefaultMargin}, oracle); err == nil {
		p.LargestBatch = t.Batch
	}
	if v, err := oracle(spec); err == nil {
		p.Asked = v
	}
	limit := int64(tuner.Limit(band, tuner.Constraints{Margin: tuner.DefaultMargin}) * float64(spec.Device.Memory))
	for _, c := range changes(spec.Training) {
		s := *spec
		c.apply(&s.Training)
		v, err := oracle(&s)
		if err != nil {
			continue
		}
		p.Changes = append(p.Changes, Change{Change: c.name, Bytes: v, Fits: v <= limit})
	}
	return p, nil
}

type change struct {
	name  string
	apply func(*model.Training)
}

// changes are the single changes tried, cheapest first.
func changes(t model.Training) []change {
	var cs []change
	if estimate.MayRace(t) {
		// An out-of-memory error at the second step of a DDP job can be
		// DDP's bucket rebuild race (docs/multigpu.md).
		p := estimate.DDPSettle
		cs = append(cs, change{fmt.Sprintf("--step-pause %g (%s: DDP frees its old gradient bucket at its rebuild)", p, estimate.PauseRecipe),
			func(x *model.Training) { x.StepPause = p }})
	}
	if t.Checkpointing.Mode != model.CkptBlock {
		cs = append(cs, change{"--checkpointing every-block", func(x *model.Training) { x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock} }})
	}
	if t.Optimizer.Impl == model.ImplForeach && (t.Optimizer.Name == model.Adam || t.Optimizer.Name == model.AdamW) {
		cs = append(cs, change{"--optimizer " + t.Optimizer.Name + "-fused", func(x *model.Training) { x.Optimizer.Impl = model.ImplFused }})
	}
	if t.Precision != model.BF16 {
		cs = append(cs, change{"--precision bf16", func(x *model.Training) { x.Precision = model.BF16 }})
	}
	return cs
}

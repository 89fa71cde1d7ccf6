package tuner

import (
	"fmt"
	"sort"

	"github.com/memplan/memplan/model"
)

// Fix is a spec change that makes batch 1 fit, with its prediction.
type Fix struct {
	// Change is what to set, as command-line overrides.
	Change      string  `json:"change"`
	Why         string  `json:"why"`
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
	Fits        bool    `json:"fits"`
	cost        int
}

// Fixes tries single changes at batch 1, in order of least cost to the
// job (memory saved for the least speed or quality given up), and returns
// each with its predicted device total, those that fit first. Sharding
// (ZeRO) and offload are not simulated yet and are not offered.
func Fixes(spec *model.Spec, band Band, oracle Oracle) []Fix {
	t := spec.Training
	type cand struct {
		change, why string
		cost        int
		apply       func(*model.Training)
	}
	var cs []cand
	if t.Optimizer.Impl == model.ImplForeach && (t.Optimizer.Name == model.Adam || t.Optimizer.Name == model.AdamW) {
		cs = append(cs, cand{"--optimizer " + t.Optimizer.Name + "-fused", "same math, no parameter-sized temporary in the step", 0,
			func(x *model.Training) { x.Optimizer.Impl = model.ImplFused }})
	}
	if t.Checkpointing.Mode != model.CkptBlock {
		cs = append(cs, cand{"--checkpointing every-block", "recompute each block in backward (about a third more compute)", 1,
			func(x *model.Training) { x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock} }})
	}
	if t.Precision == model.FP32 {
		cs = append(cs, cand{"--precision amp-bf16", "bf16 autocast: half-size activations", 1,
			func(x *model.Training) { x.Precision = model.AMPBF16 }})
	}
	if t.Precision != model.BF16 {
		cs = append(cs, cand{"--precision bf16", "pure bf16 weights, gradients and optimizer state (watch convergence)", 2,
			func(x *model.Training) { x.Precision = model.BF16 }})
	}
	if t.Optimizer.Name == model.Adam || t.Optimizer.Name == model.AdamW {
		cs = append(cs, cand{"--optimizer adam8bit", "8-bit optimizer state (bitsandbytes)", 2,
			func(x *model.Training) { x.Optimizer = model.Optimizer{Name: model.Adam8bit, Impl: model.ImplFused} }})
		cs = append(cs, cand{"--optimizer adafactor", "factored second moments", 3,
			func(x *model.Training) { x.Optimizer = model.Optimizer{Name: model.Adafactor, Impl: model.ImplForLoop} }})
	}
	// Combinations, cheapest first.
	combo := cand{"--checkpointing every-block --precision bf16 --optimizer adamw-fused", "all of the above that keep Adam", 4,
		func(x *model.Training) {
			x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
			x.Precision = model.BF16
			if x.Optimizer.Name == model.Adam || x.Optimizer.Name == model.AdamW {
				x.Optimizer.Impl = model.ImplFused
			}
		}}
	cs = append(cs, combo)
	limit := int64(band.Hi * float64(spec.Device.Memory))
	var out []Fix
	for _, c := range cs {
		s := *spec
		s.Training.Batch = 1
		c.apply(&s.Training)
		v, err := oracle(&s)
		if err != nil {
			continue
		}
		out = append(out, Fix{Change: c.change, Why: c.why, DeviceTotal: v,
			Fill: float64(v) / float64(spec.Device.Memory), Fits: v <= limit, cost: c.cost})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Fits != out[j].Fits {
			return out[i].Fits
		}
		if out[i].Fits {
			return out[i].cost < out[j].cost
		}
		return out[i].DeviceTotal < out[j].DeviceTotal
	})
	if len(out) > 0 && !out[0].Fits {
		out = append(out, Fix{Change: "a larger GPU or sharding over several", Why: fmt.Sprintf("no single change fits %s", spec.Device.Name)})
	}
	return out
}

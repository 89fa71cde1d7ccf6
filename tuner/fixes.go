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
	// GPUs is how many GPUs the changed job runs on.
	GPUs int64 `json:"gpus"`
	// Cost ranks the throughput given up (docs/tuner.md, "Fixes"): lower
	// is cheaper.
	Cost int `json:"cost_rank"`
}

// Fixes tries changes at batch 1, in order of least cost to the job
// (memory saved for the least speed or quality given up): single-GPU
// changes first, then sharding over the fewest GPUs that fits for each ZeRO
// stage (alone and with checkpointing), then offload to host memory. It
// re-estimates each and returns only those that fit the target under the
// one rule (Fits, with margin), ordered by the GPUs they need, then by their
// throughput cost; when none fits it returns the closest miss followed by
// "a larger GPU", so the caller can say by how much.
func Fixes(spec *model.Spec, band Band, margin float64, oracle Oracle) []Fix {
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
	var out []Fix
	try := func(c cand) (Fix, bool) {
		s := *spec
		s.Training.Batch = 1
		c.apply(&s.Training)
		v, err := oracle(&s)
		if err != nil {
			return Fix{}, false
		}
		return Fix{Change: c.change, Why: c.why, DeviceTotal: v, GPUs: int64(max(s.Training.DP, 1)),
			Fill: float64(v) / float64(spec.Device.Memory),
			Fits: Fits(v, spec.Device.Memory, band, margin) == FitsTarget, Cost: c.cost}, true
	}
	for _, c := range cs {
		if f, ok := try(c); ok {
			out = append(out, f)
		}
	}
	// Sharding: for each ZeRO stage the fewest GPUs (powers of two up to
	// maxDP) that fit, with and without checkpointing.
	why := [4]string{"", "optimizer state sharded over the GPUs (ZeroRedundancyOptimizer, DeepSpeed stage 1)",
		"optimizer state and gradients sharded, whole parameters only during forward and backward (FSDP without resharding, DeepSpeed stage 2)",
		"optimizer state, gradients and parameters sharded (FSDP fully_shard, DeepSpeed stage 3)"}
	ckpts := []bool{false}
	if t.Checkpointing.Mode == model.CkptNone {
		ckpts = append(ckpts, true)
	}
	for _, ck := range ckpts {
		for z := int64(max(t.Zero, 0) + 1); z <= 3; z++ {
			var last Fix
			found := false
			for n := max(t.DP, 1) * 2; n <= maxDP; n *= 2 {
				z, n, ck := z, n, ck
				change := fmt.Sprintf("--dp %d --zero %d", n, z)
				cost := 4 + int(z)
				if ck {
					change, cost = "--checkpointing every-block "+change, cost+1
				}
				f, ok := try(cand{change, fmt.Sprintf("%s, %d GPUs", why[z], n), cost, func(x *model.Training) {
					x.DP, x.Zero = n, z
					if ck {
						x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
					}
				}})
				if !ok {
					break
				}
				last, found = f, true
				if f.Fits {
					break
				}
			}
			if found {
				out = append(out, last)
			}
		}
	}
	// Offload to host memory, on the GPUs the job already has.
	for _, c := range []cand{
		{"--zero 2 --offload optimizer", "ZeRO-Offload: optimizer state, gradients and the optimizer step on the host (slower steps)", 9,
			func(x *model.Training) { x.Zero, x.Offload = max(x.Zero, 2), model.OffloadOptimizer }},
		{"--zero 3 --offload params --checkpointing every-block", "ZeRO-Infinity: also the parameter shards on the host, with checkpointing (slowest)", 10,
			func(x *model.Training) {
				x.Zero, x.Offload = 3, model.OffloadParams
				x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
			}},
	} {
		if f, ok := try(c); ok {
			out = append(out, f)
		}
	}
	return rank(out, spec.Device.Name)
}

// rank keeps the fixes that fit, fewest GPUs first, then cheapest. When
// none fits it keeps the closest miss, marked as not fitting, and "a larger
// GPU".
func rank(out []Fix, device string) []Fix {
	var fit []Fix
	var closest *Fix
	for i := range out {
		if out[i].Fits {
			fit = append(fit, out[i])
		} else if closest == nil || out[i].DeviceTotal < closest.DeviceTotal {
			closest = &out[i]
		}
	}
	sort.SliceStable(fit, func(i, j int) bool {
		if fit[i].GPUs != fit[j].GPUs {
			return fit[i].GPUs < fit[j].GPUs
		}
		return fit[i].Cost < fit[j].Cost
	})
	if len(fit) > 0 || closest == nil {
		return fit
	}
	return []Fix{*closest, {Change: "a larger GPU", Why: fmt.Sprintf("nothing tried fits %s", device)}}
}

// maxDP is the most GPUs a sharding recommendation spreads over.
const maxDP = 64

package tuner

import (
	"fmt"
	"slices"
	"sort"

	"github.com/memplan/memplan/estimate"
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

// cand is one change to try at batch 1.
type cand struct {
	change, why string
	cost        int
	apply       func(*model.Training)
}

// Fixes tries changes at batch 1, in order of least cost to the job
// (memory saved for the least speed or quality given up): single-GPU
// changes first, then sharding over the fewest GPUs that fits for each ZeRO
// stage (alone and with checkpointing), then offload to host memory. It
// returns the fixes that fit the target under the one rule (Fits, with
// margin) and that no other fitting fix beats on both GPUs and throughput
// cost (one that needs no more GPUs and costs no more, and is better in
// one of the two), ordered by the GPUs they need, then by their cost. A
// change beaten that way by a fix already found is not estimated. When
// none fits it returns the closest miss followed by "a larger GPU", so the
// caller can say by how much.
func Fixes(spec *model.Spec, band Band, margin float64, oracle Oracle) []Fix {
	f := fixer{spec: spec, band: band, margin: margin, oracle: oracle}
	return f.all()
}

func (f *fixer) all() []Fix {
	spec := f.spec
	for _, c := range singleGPU(spec) {
		f.tryAppend(c)
	}
	f.sharding()
	for _, c := range offload() {
		f.tryAppend(c)
	}
	return rank(f.out, spec.Device.Name)
}

// FirstFix returns what Fixes returns first, estimating less: once a fix
// fits, nothing that needs more GPUs, or as many at no lower cost, is
// estimated. When no fix fits it returns what Fixes does.
func FirstFix(spec *model.Spec, band Band, margin float64, oracle Oracle) []Fix {
	f := fixer{spec: spec, band: band, margin: margin, oracle: oracle}
	return f.first1()
}

func (f *fixer) first1() []Fix {
	f.first = true
	spec := f.spec
	for _, c := range singleGPU(spec) {
		f.tryAppend(c)
	}
	// Offload keeps the job's GPUs, so it ranks before any sharding.
	for _, c := range offload() {
		f.tryAppend(c)
	}
	f.sharding()
	out := rank(f.out, spec.Device.Name)
	if len(out) > 0 && out[0].Fits {
		return out[:1]
	}
	return out
}

// fixer holds the fixes found so far.
type fixer struct {
	spec   *model.Spec
	band   Band
	margin float64
	oracle Oracle
	out    []Fix
	// first: only the first fix in rank order is wanted (FirstFix).
	first bool
	// bound: Constraints.Bound, or nil.
	bound func(*model.Spec) int64
	// stop: Constraints.Stop, or nil.
	stop StopOracle
}

// stopLevel is the device total above which the estimate of a fix may
// stop (Constraints.Stop): the limit for FirstFix, which wants only a fix
// that fits; for Fixes the closest miss so far, since a fix above it
// neither fits nor comes closer (0, no stop, before the first miss).
func (f *fixer) stopLevel() int64 {
	limit := limitBytes(f.band, f.margin, f.spec.Device.Memory)
	if f.first {
		return limit
	}
	var closest int64
	for _, x := range f.out {
		if !x.Fits && (closest == 0 || x.DeviceTotal < closest) {
			closest = x.DeviceTotal
		}
	}
	if closest == 0 {
		return 0
	}
	return max(closest, limit)
}

// missesCand is misses for c applied at batch 1.
func (f *fixer) missesCand(c cand) bool {
	if f.bound == nil {
		return false
	}
	s := f.apply(c)
	return f.misses(&s)
}

// misses reports whether the bound says s cannot fit, unestimated.
func (f *fixer) misses(s *model.Spec) bool {
	return f.bound != nil && f.bound(s) > limitBytes(f.band, f.margin, f.spec.Device.Memory)
}

// apply returns the spec at batch 1 with c applied.
func (f *fixer) apply(c cand) model.Spec {
	s := *f.spec
	s.Training.Batch = 1
	c.apply(&s.Training)
	return s
}

// beaten reports whether a fix already found fits with no more GPUs and no
// more cost than (gpus, cost), and is better in one of the two; for
// FirstFix, whether one fits that ranks before (gpus, cost) or equal to it.
func (f *fixer) beaten(gpus int64, cost int) bool {
	for _, x := range f.out {
		if !x.Fits {
			continue
		}
		if f.first && (x.GPUs < gpus || x.GPUs == gpus && x.Cost <= cost) {
			return true
		}
		if x.GPUs <= gpus && x.Cost <= cost && (x.GPUs < gpus || x.Cost < cost) {
			return true
		}
	}
	return false
}

// try estimates c at batch 1.
func (f *fixer) try(c cand) (Fix, bool) {
	s := f.apply(c)
	if model.KnownFailure(&s.Training, &s.Model) != "" {
		return Fix{}, false // a change that would stop the run for another reason
	}
	var v int64
	var err error
	if f.stop != nil {
		v, _, err = f.stop(&s, f.stopLevel())
	} else {
		v, err = f.oracle(&s)
	}
	if err != nil {
		return Fix{}, false
	}
	return Fix{Change: c.change, Why: c.why, DeviceTotal: v, GPUs: int64(max(s.Training.DP, 1)),
		Fill: float64(v) / float64(f.spec.Device.Memory),
		Fits: Fits(v, f.spec.Device.Memory, f.band, f.margin) == FitsTarget, Cost: c.cost}, true
}

// tryAppend estimates c, unless a fix found already beats it, and keeps it.
func (f *fixer) tryAppend(c cand) {
	s := f.apply(c)
	if f.beaten(int64(max(s.Training.DP, 1)), c.cost) || f.misses(&s) {
		return
	}
	if x, ok := f.try(c); ok {
		f.out = append(f.out, x)
	}
}

// singleGPU lists the changes that keep the job's GPUs, cheapest first.
func singleGPU(spec *model.Spec) []cand {
	t := spec.Training
	var cs []cand
	if estimate.MayRace(t) {
		p := estimate.DDPSettle
		cs = append(cs, cand{fmt.Sprintf("--step-pause %g", p),
			estimate.PauseRecipe + ": DDP frees its old gradient bucket at its rebuild", 0,
			func(x *model.Training) { x.StepPause = p }})
	}
	if estimate.WrapsWhole(t) && !t.EmptyCacheAfterWrap {
		// Either way can reserve more (docs/multigpu.md): estimated, and
		// kept only where it fits.
		cs = append(cs, cand{"--empty-cache-after-wrap",
			"torch.cuda.empty_cache() once fully_shard has wrapped the model: the segments the whole parameters left go back to the driver", 0,
			func(x *model.Training) { x.EmptyCacheAfterWrap = true }})
	}
	if model.ExpertsPadded(spec.Model.ShardedExpertRows(&model.Training{}), &t) {
		// The block's experts padded to the ranks (docs/multigpu.md,
		// "FSDP2's padded shards"): sharded along their second dimension
		// instead, no rank holds padding.
		cs = append(cs, autoExperts(cand{"", "", 0, func(*model.Training) {}}))
		if t.Checkpointing.Mode != model.CkptBlock {
			cs = append(cs, autoExperts(cand{"--checkpointing every-block", "each block recomputed in backward", 1,
				func(x *model.Training) { x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock} }}))
		}
	}
	adam := t.Optimizer.Name == model.Adam || t.Optimizer.Name == model.AdamW
	if t.Optimizer.Impl == model.ImplForeach && adam {
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
	if adam {
		cs = append(cs, cand{"--optimizer adam8bit", "8-bit optimizer state (bitsandbytes)", 2,
			func(x *model.Training) { x.Optimizer = model.Optimizer{Name: model.Adam8bit, Impl: model.ImplFused} }})
		cs = append(cs, cand{"--optimizer adafactor", "factored second moments", 3,
			func(x *model.Training) { x.Optimizer = model.Optimizer{Name: model.Adafactor, Impl: model.ImplForLoop} }})
	}
	if l := t.LoRA; l.Enabled() && l.Targets != model.TargetsAttn {
		// Over DeepSeek, Qwen3-MoE and Mixtral peft's MLP targets adapt
		// every expert, with a parametrized copy of each expert stack
		// (docs/lora.md §14): the attention's adapters alone may fit.
		attn := func(x *model.Training) {
			c := *x.LoRA
			c.Targets, c.Names = model.TargetsAttn, nil
			x.LoRA = &c
		}
		cs = append(cs, cand{"--lora-targets attn", "adapters on the attention's projections only (a different fine-tune)", 3, attn})
		if t.Checkpointing.Mode != model.CkptBlock {
			cs = append(cs, cand{"--lora-targets attn --checkpointing every-block", "attention adapters only, each block recomputed in backward", 4,
				func(x *model.Training) {
					attn(x)
					x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
				}})
		}
	}
	// Combinations, cheapest first.
	return append(cs, cand{"--checkpointing every-block --precision bf16 --optimizer adamw-fused", "all of the above that keep Adam", 4,
		func(x *model.Training) {
			x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
			x.Precision = model.BF16
			if x.Optimizer.Name == model.Adam || x.Optimizer.Name == model.AdamW {
				x.Optimizer.Impl = model.ImplFused
			}
		}})
}

// offload lists the changes that move state to host memory, on the GPUs
// the job already has.
func offload() []cand {
	return []cand{
		{"--zero 2 --offload optimizer", "ZeRO-Offload: optimizer state, gradients and the optimizer step on the host (slower steps)", 9,
			func(x *model.Training) { x.Zero, x.Offload = max(x.Zero, 2), model.OffloadOptimizer }},
		{"--zero 3 --offload params --checkpointing every-block", "ZeRO-Infinity: also the parameter shards on the host, with checkpointing (slowest)", 10,
			func(x *model.Training) {
				x.Zero, x.Offload = 3, model.OffloadParams
				x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
			}},
	}
}

var zeroWhy = [4]string{"", "optimizer state sharded over the GPUs (ZeroRedundancyOptimizer, DeepSpeed stage 1)",
	"optimizer state and gradients sharded, whole parameters only during forward and backward (FSDP without resharding, DeepSpeed stage 2)",
	"optimizer state, gradients and parameters sharded (FSDP fully_shard, DeepSpeed stage 3)"}

// firstShardDP is the fewest GPUs a sharding fix tries: the job's own when
// it already has several (a higher ZeRO stage on the same GPUs), else two.
func firstShardDP(t model.Training) int64 {
	if t.DP > 1 {
		return t.DP
	}
	return 2
}

// sharding adds, for each ZeRO stage above the job's, alone and with
// checkpointing, the fewest GPUs (the job's own, then powers of two times
// them, up to maxDP) that fit, or the miss on the most GPUs when none does.
func (f *fixer) sharding() {
	t := f.spec.Training
	ckpts := []bool{false}
	if t.Checkpointing.Mode == model.CkptNone {
		ckpts = append(ckpts, true)
	}
	experts := f.spec.Model.ShardedExpertRows(&model.Training{})
	for _, ck := range ckpts {
		var ns []int64
		for n := firstShardDP(t); n <= maxDP; n *= 2 {
			ns = append(ns, n)
		}
		for z := int64(max(t.Zero, 0) + 1); z <= 3; z++ {
			x, ok := f.fewestPadded(ns, experts, z, ck)
			if ok {
				f.out = append(f.out, x)
			}
			if z < 3 {
				continue
			}
			if !ok || !x.Fits {
				continue // resharded to a node needs more than ZeRO 3: nor can it fit
			}
			if r, found := f.fewestResharded(ns, x.GPUs, experts, ck); found {
				// Before ZeRO 3 resharded over all: at the same GPUs and
				// cost it ranks first (rank's sort is stable), its
				// backward's all-gathers staying in the node.
				f.out = slices.Insert(f.out, len(f.out)-1, r)
			}
		}
	}
}

// fewestResharded is the fewest of ns GPUs, more than a node's and at
// least from (where ZeRO 3 first fits: it never needs more), at which
// ZeRO 3 resharded to the node's GPUs after each forward fits (FSDP2's
// reshard_after_forward=8: docs/multigpu.md, "Resharding to N ranks"):
// between ZeRO 2 and 3 in memory, with the backward's all-gathers inside
// each node. Only where model.ReshardError allows it (not beside tensor
// parallelism, which torch 2.11 refuses, nor with a pipeline, context or
// expert parallelism), and not past a block's experts (whose padded
// shards grow with the GPUs).
func (f *fixer) fewestResharded(ns []int64, from, experts int64, ck bool) (Fix, bool) {
	t := f.spec.Training
	var big []int64
	for _, n := range ns {
		t.DP, t.Zero, t.ReshardAfterForward = n, 3, model.NodeGPUs
		if n > model.NodeGPUs && n >= from && model.ReshardError(&t) == nil && !model.ExpertsPadded(experts, &t) {
			big = append(big, n)
		}
	}
	if len(big) == 0 {
		return Fix{}, false
	}
	return f.fewest(big, func(n int64) cand {
		c := shard(n, 3, ck)
		c.change += fmt.Sprintf(" --reshard-after-forward %d", model.NodeGPUs)
		c.why = fmt.Sprintf("parameters sharded, each unit keeping 1/%d of them from its forward to its backward, whose all-gather stays inside a node of %d GPUs (FSDP2's reshard_after_forward=%d), %d GPUs",
			model.NodeGPUs, model.NodeGPUs, model.NodeGPUs, n)
		apply := c.apply
		c.apply = func(x *model.Training) {
			apply(x)
			x.ReshardAfterForward = model.NodeGPUs
		}
		return c
	})
}

// shard is the change to n GPUs at ZeRO stage z, with checkpointing when ck.
func shard(n, z int64, ck bool) cand {
	change := fmt.Sprintf("--dp %d --zero %d", n, z)
	cost := 4 + int(z)
	if ck {
		change, cost = "--checkpointing every-block "+change, cost+1
	}
	return cand{change, fmt.Sprintf("%s, %d GPUs", zeroWhy[z], n), cost, func(x *model.Training) {
		x.DP, x.Zero = n, z
		if ck {
			x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
		}
	}}
}

// fewest returns the fix on the fewest of ns GPUs (ascending) that fits,
// each change made by at (shard at one ZeRO stage, or autoExperts of it),
// or the miss on the most of them. GPUs where a fix already found
// beats this one are left out. Over ns, memory per GPU does not grow with
// the GPUs a stage shards over (fewestPadded keeps it so), so it estimates
// the most first (a miss there ends it) and bisects; if an estimate fails
// it walks up from the fewest, as the full scan did.
func (f *fixer) fewest(ns []int64, at func(n int64) cand) (Fix, bool) {
	cost := at(1).cost
	for len(ns) > 0 && f.beaten(ns[len(ns)-1], cost) {
		ns = ns[:len(ns)-1]
	}
	if len(ns) == 0 {
		return Fix{}, false
	}
	if f.missesCand(at(ns[len(ns)-1])) {
		return Fix{}, false // the most GPUs cannot fit: nor can fewer
	}
	hi, ok := f.try(at(ns[len(ns)-1]))
	if !ok {
		return f.walk(ns, at)
	}
	if !hi.Fits {
		return hi, true
	}
	// ns[:j] misses or is unknown, ns[j] fits.
	lo, j := -1, len(ns)-1
	for j-lo > 1 {
		m := (lo + j) / 2
		if f.missesCand(at(ns[m])) {
			lo = m
			continue
		}
		x, ok := f.try(at(ns[m]))
		if !ok {
			return f.walk(ns, at)
		}
		if x.Fits {
			j, hi = m, x
		} else {
			lo = m
		}
	}
	return hi, true
}

// walk estimates ns in order, each change made by at, and stops at the first that fits or fails,
// returning the last estimated.
func (f *fixer) walk(ns []int64, at func(n int64) cand) (Fix, bool) {
	var last Fix
	found := false
	for _, n := range ns {
		if f.missesCand(at(n)) {
			continue
		}
		x, ok := f.try(at(n))
		if !ok {
			break
		}
		last, found = x, true
		if x.Fits {
			break
		}
	}
	return last, found
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

// SomeFixFits reports whether one of fixes fits the target.
func SomeFixFits(fixes []Fix) bool {
	for _, f := range fixes {
		if f.Fits {
			return true
		}
	}
	return false
}

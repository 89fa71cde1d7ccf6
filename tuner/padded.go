package tuner

import (
	"slices"
	"strings"

	"github.com/memplan/memplan/model"
)

// A block's experts that FSDP2 pads (docs/multigpu.md, "FSDP2's padded
// shards"): the sharding search past them, and the change that shards them
// along their second dimension instead.

// fewestPadded is fewest where FSDP2 would pad the shards of a block's
// experts once the GPUs outnumber them (model.ExpertsPadded; docs/multigpu.md,
// "FSDP2's padded shards"), so that past there more GPUs would need more
// memory each. fewest searches the GPUs short of that as they are; the
// rest it searches with the experts sharded along their second dimension
// (autoExperts), where memory per GPU does not grow, and the closer miss
// of the two is kept.
func (f *fixer) fewestPadded(ns []int64, experts, z int64, ck bool) (Fix, bool) {
	t := f.spec.Training
	cut := slices.IndexFunc(ns, func(n int64) bool {
		t.DP, t.Zero = n, z
		return model.ExpertsPadded(experts, &t)
	})
	at := func(n int64) cand { return shard(n, z, ck) }
	if cut < 0 {
		return f.fewest(ns, at)
	}
	x, ok := Fix{}, false
	if cut > 0 {
		x, ok = f.fewest(ns[:cut], at)
		if ok && x.Fits {
			return x, true
		}
	}
	y, found := f.fewest(ns[cut:], func(n int64) cand { return autoExperts(shard(n, z, ck)) })
	switch {
	case !found:
		return x, ok
	case !ok, y.Fits, y.DeviceTotal < x.DeviceTotal:
		return y, true
	}
	return x, true
}

// autoExperts is c with a block's experts sharded along their second
// dimension where the GPUs outnumber them (--fsdp-experts auto, as
// torchtitan shards them): no shard is padded, and memory per GPU no
// longer grows with the GPUs.
func autoExperts(c cand) cand {
	why := "experts sharded along their second dimension where the GPUs outnumber them (fully_shard's shard_placement_fn, as torchtitan does): no padded expert rows"
	if c.why != "" {
		why = c.why + "; " + why
	}
	apply := c.apply
	return cand{strings.TrimSpace(c.change + " --fsdp-experts auto"), why, c.cost, func(x *model.Training) {
		apply(x)
		x.FSDPExperts = model.FSDPExpertsAuto
	}}
}

package estimate

import "sort"

// FSDP2's units (fully_shard on each block and on the root) and what each
// moves: fsdp.go runs them.

// fsdpUnit is one fully_shard unit: a transformer block, or the root (every
// parameter outside the blocks), or under expert parallelism a block's
// routed experts, a unit nested in the block's and sharded over the dp·tp/ep
// ranks that hold the same experts (torchtitan's apply_fsdp at torch 2.11:
// fully_shard(block.moe.experts, mesh=edp_mesh) before fully_shard(block)).
type fsdpUnit struct {
	params []*tensor
	elems  int64 // whole elements, each parameter counted once
	deg    int64 // W, the ranks the unit is sharded over
	shard  int64 // this rank's elements: Σ padShard(p, W) per parameter
	// gather is the all-gather's dtype (bytes per element) and gatherShard
	// this rank's part of its flat output: the parameters' unsharded dtype
	// and shard, or, when their dtypes differ (LoRA's fp32 adapters beside
	// a bf16 base), bytes (foreach_all_gather views every input as uint8).
	gather, gatherShard int64
	// trainable is the first parameter with a gradient (nil: a frozen
	// unit, which reduces nothing); gradShard its unit's elements of them,
	// reduced in dtype reduce (FSDPParamGroup.post_backward hands
	// foreach_reduce only the parameters with a .grad).
	trainable         *tensor
	gradShard, reduce int64
	idx               int16 // position in sim.units (0: the root)
	// nested is a block's experts unit; parent is the experts unit's block.
	nested, parent *fsdpUnit
	// order is params in registration order, the order of the unsharded
	// storages; held are those storages while the unit is unsharded.
	order []*tensor
	held  []*tensor
	// postFwd are the clones a unit resharded to N ranks after its
	// forward keeps until its backward's copy-out (resharded).
	postFwd   []*tensor
	unsharded bool
	backward  bool // between its pre-backward and its post-backward
	// grads are the unit's parameters holding an unsharded gradient
	// (their .grad), from AccumulateGrad to its post-backward.
	grads []*tensor
}

// storage is the elements of p's unsharded storage in u: its padded shard
// times the unit's ranks (FSDPParam.init_all_gather_outputs; unshard).
func (u *fsdpUnit) storage(p *tensor) int64 { return padShard(p, u.deg) * u.deg }

// fsdpUnits groups the parameters by unit, the root first (it is gathered
// first), then the blocks in order, each after its nested experts unit
// (FSDP2's post-forward order, which its backward prefetch follows back);
// a shared (tied) parameter belongs to the first unit that holds it. deg is
// each parameter's shard degree (sim.degree); nest says which go to their
// block's experts unit (the routed experts under expert parallelism, which
// torchtitan wraps in a fully_shard of their own over efsdp even where its
// size is dp's). With mark, each block's instance points to its unit.
// reduce is the policy's reduce dtype, or 0 for the gradients' own.
func fsdpUnits(ins []*inst, dp int64, deg func(*tensor) int64, nest func(*tensor) bool, mark bool, reduce int64) []*fsdpUnit {
	root := &fsdpUnit{deg: dp}
	units := []*fsdpUnit{root}
	seen := map[*tensor]bool{}
	var walk func(ins []*inst, u *fsdpUnit)
	walk = func(ins []*inst, u *fsdpUnit) {
		for _, in := range ins {
			own := u
			if in.unit {
				own = &fsdpUnit{deg: dp}
				units = append(units, own)
				if mark {
					in.fsdp = own // the block's forward unshards it (fsdpForward)
				}
			}
			for _, p := range in.p {
				if p == nil || seen[p] {
					continue
				}
				seen[p] = true
				dst := own
				if nest(p) {
					if own.nested == nil {
						own.nested = &fsdpUnit{deg: deg(p), parent: own}
					}
					dst = own.nested
				}
				dst.add(p)
				if p.lora != nil {
					// peft's lora.Linear registers its adapters after the
					// base layer: they join the base weight's unit.
					dst.add(p.lora.a)
					dst.add(p.lora.b)
				}
			}
			for list := range in.sublists() {
				walk(list, own)
			}
		}
	}
	walk(ins, root)
	var out []*fsdpUnit
	add := func(u *fsdpUnit) {
		if u != nil && len(u.params) > 0 {
			u.idx = int16(len(out))
			out = append(out, u)
		}
	}
	add(root)
	add(root.nested)
	for _, u := range units[1:] {
		add(u.nested)
		add(u)
	}
	// Registration order within each unit (ddp.go's registered, peft's
	// adapters after their linear).
	pos := map[*tensor]int{}
	for i, p := range registered(ins, map[*tensor]bool{}, nil, true) {
		pos[p] = i
	}
	for _, u := range out {
		u.order = append([]*tensor(nil), u.params...)
		sort.SliceStable(u.order, func(i, j int) bool { return pos[u.order[i]] < pos[u.order[j]] })
		u.dtypes(reduce)
	}
	return out
}

// add puts parameter p in the unit.
func (u *fsdpUnit) add(p *tensor) {
	u.params = append(u.params, p)
	u.elems += p.elems
	u.shard += padShard(p, u.deg)
}

// dtypes sets what the unit's all-gather and reduce-scatter move: the
// all-gather in the parameters' unsharded dtype, or in bytes when they
// differ; the trainable parameters' shard, reduced in dtype reduce, or
// in their own when reduce is 0.
func (u *fsdpUnit) dtypes(reduce int64) {
	u.gather, u.gatherShard = 0, 0
	for _, p := range u.params {
		switch {
		case u.gather == 0:
			u.gather = p.dt
		case u.gather != p.dt:
			u.gather = u8
		}
		if p.req {
			if u.trainable == nil {
				u.trainable, u.reduce = p, p.dt
				if reduce != 0 {
					u.reduce = reduce
				}
			}
			u.gradShard += padShard(p, u.deg)
		}
	}
	u.gatherShard = u.shard
	if u.gather == u8 {
		u.gatherShard = 0
		for _, p := range u.params {
			u.gatherShard += padShard(p, u.deg) * p.dt
		}
	}
}

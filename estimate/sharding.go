package estimate

import (
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// Data parallelism and ZeRO, per GPU (docs/formulas.md §G).
//
// DP > 1 at stage 0 is DistributedDataParallel: every rank holds
// everything, plus the reducer's flat gradient buckets, as large as the
// gradients (gradient_as_bucket_view=False, the default). Stage 1 is
// ZeroRedundancyOptimizer over DDP: the buckets stay, and the optimizer
// state and its step's temporaries are held for this rank's parameters
// only (shards). DDP's construction and bucket rebuild are ddp.go's.
// Stages 2 and 3 are FSDP's fully_shard: each rank keeps a shard of every
// parameter and gathers whole parameters for the forward and backward.
// Over data parallelism (fsdp.go; in pipeline stages and under context
// parallelism over dp·cp too) each unit's whole parameters are storages
// of their own, made before the unit runs and freed after its backward
// (stage 2, reshard_after_forward=False) or after each pass (stage 3), and
// its gradients are reduced together in its post-backward. Where FSDP2's
// streams are not simulated (fsdpStreams: offload, or a single rank) they
// are held as one block: all of them from the first forward to the end of
// the backward (stage 2), or the non-block parameters (embeddings, head)
// and two blocks (stage 3), each gradient reduced to its shard as soon as
// it is produced.
//
// Offload keeps the optimizer state and step (and with "params" the
// parameter shards) in host memory. NCCL's buffers, outside the caching
// allocator, are an overhead line of their own (estimate.go); FSDP2's
// all-gather and reduce-scatter streams have their own pools (fsdp.go).

// paramTotal is the bytes of all parameters, whole.
func (s *sim) paramTotal() int64 {
	var n int64
	for _, p := range s.params {
		n += p.bytes()
	}
	return n
}

// degree is how many ranks share parameter t's storage under ZeRO 2 and
// 3: every data-parallel rank, but under expert parallelism the dp·tp/ep
// ranks that hold the same routed experts for an expert's (torchtitan
// shards them over its efsdp mesh in a fully_shard unit of their own,
// fsdp.go; config.efsdp).
func (s *sim) degree(t *tensor) int64 {
	if s.expertUnit(t) {
		return s.cfg.efsdp
	}
	return s.cfg.dp
}

// expertUnit says whether parameter t is a routed expert's under expert
// parallelism, which FSDP2 shards in its block's experts unit (degree).
func (s *sim) expertUnit(t *tensor) bool { return t.expert && s.cfg.ep > 1 }

// shardDt is the bytes per element of parameter t's shard under ZeRO 2
// and 3: the master dtype's, or the parameter's own (tensor.sdt).
func (s *sim) shardDt(t *tensor) int64 {
	if t.sdt != 0 {
		return int64(t.sdt)
	}
	return s.cfg.master
}

// placeShard gives a parameter built under ZeRO 2 or 3 its shard on this
// rank: now, or when wrapFromHost shards the model; none when the
// parameters are offloaded.
func (s *sim) placeShard(t *tensor) {
	switch {
	case s.hostWrap:
		s.unsharded = append(s.unsharded, t)
	case s.cfg.offload != model.OffloadParams:
		s.allocShard(t)
	}
}

// allocShard allocates parameter t's shard, held for the whole run.
func (s *sim) allocShard(t *tensor) {
	s.alloc(s.shardOf(t), s.shardDt(t), catParam, t.name).prefix = "shard of "
}

// shardBytes is what FSDP keeps of the parameters and their gradients on
// this rank: the shards param and adapterParam allocate, LoRA's frozen
// base among the parameters with no gradient.
func (s *sim) shardBytes() (params, grads int64) {
	for _, p := range s.params {
		params += s.shardOf(p) * s.shardDt(p)
	}
	grads = params
	for _, p := range s.frozen {
		params += s.shardOf(p) * s.shardDt(p)
	}
	return params, grads
}

// shardOf is this rank's part of parameter t's elements.
func (s *sim) shardOf(t *tensor) int64 { return padShard(t, s.degree(t)) }

// padShard is the elements of parameter t on the first of w ranks: FSDP2
// shards a parameter along its first dimension, padded to a multiple of w
// (FSDPParam's padded sharded data, and the reduce-scatter input's
// _get_dim0_padded_size); measured: a Qwen2-MoE block's shared-expert gate
// [1, h] takes two rows of the reduce-scatter input over two ranks,
// bench/results/2026-11-26-h200x4-ep-fsdp-snapshots). A matrix [lead,
// second, last] is split along lead when there is one — a block's experts,
// even one of them (tensor.expert: a single expert over two ranks is one
// rank's whole and the other's padding, measured:
// bench/results/2026-11-28-h200x2-padded-experts.jsonl) — and second
// otherwise; a vector along its elements.
// A routed expert's weight marked dim1 is split along its second
// dimension instead, each expert's rows padded alike.
func padShard(t *tensor, w int64) int64 {
	rows, row := t.elems, int64(1)
	if t.second > 0 && t.last > 0 {
		row = t.last
		rows = t.elems / t.last
		if lead := rows / t.second; t.dim1 {
			return lead * ((t.second + w - 1) / w) * t.last
		} else if lead > 1 || t.expert {
			rows, row = lead, t.second*t.last
		}
	}
	return (rows + w - 1) / w * row
}

// markDim1 marks the routed experts' weights FSDP2 shards along their
// second dimension (model.ExpertsAlongDim1): each block's local experts
// over the ranks that shard them (degree).
func (s *sim) markDim1() {
	for _, list := range [][]*tensor{s.params, s.frozen} {
		for _, p := range list {
			s.markDim1Of(p)
		}
	}
}

// markDim1Of marks parameter p when it is a routed expert's weight that
// FSDP2 shards along its second dimension (markDim1).
func (s *sim) markDim1Of(p *tensor) {
	if s.cfg.zero < 2 || s.cfg.fsdpExperts == model.FSDPExpertsDim0 {
		return
	}
	if p.expert && p.second > 0 && p.last > 0 {
		lead := p.elems / (p.second * p.last)
		p.dim1 = model.ExpertsAlongDim1(s.cfg.fsdpExperts, lead, s.degree(p))
	}
}

// shards are the parameters (or slices of them) whose optimizer state this
// GPU holds. Stage 1 is ZeroRedundancyOptimizer, which assigns whole
// parameters to ranks, largest first, each to the rank with the fewest
// elements so far; the estimate is for the rank that ends up with the
// most. Stages 2 and 3 shard every parameter evenly (FSDP, DeepSpeed).
func (s *sim) shards() []*tensor {
	if s.cfg.zero == 1 {
		numels := make([]int64, len(s.params))
		for i, p := range s.params {
			numels[i] = p.elems
		}
		part, err := parallel.ZeroPartition(numels, int(s.cfg.dp))
		if err != nil {
			s.err = err
			return nil
		}
		s.zeroPart = &part
		heavy, _ := part.Busiest()
		out := make([]*tensor, len(part.Ranks[heavy]))
		for i, k := range part.Ranks[heavy] {
			out[i] = s.params[k]
		}
		return out
	}
	out := s.slab.ptrs(len(s.params))[:len(s.params)]
	for i, p := range s.params {
		t := s.slab.tensor()
		*t = tensor{elems: s.shardOf(p), dt: s.shardDt(p), last: p.last, second: p.second}
		out[i] = t
	}
	return out
}

// shardSetup allocates what sharding holds for the whole run once the
// model is built: DDP's buckets, or the size of what FSDP gathers.
func (s *sim) shardSetup(ins []*inst) {
	s.markDim1()
	switch {
	case s.cfg.dp > 1 && s.cfg.zero <= 1:
		s.ddpConstruct(ins) // ddp.go
	case s.cfg.zero == 2:
		s.gathered = s.paramTotal()
	case s.cfg.zero >= 3:
		root, unit := paramBytes(ins, map[*tensor]bool{})
		s.gathered = root + 2*unit
	}
	if s.fsdpStreams() {
		// Per-parameter unsharded storages (fsdp.go), also in a pipeline
		// stage (schedule.go; measured, bench/results/
		// 2026-11-26-h100x4-pp-dp-traces/fsdp), in the interleaved
		// schedule's stages (each its own fully_shard root in
		// torchtitan; their units are gathered at their first forward and
		// kept to the step's end all the same) and under context
		// parallelism over dp·cp (measured: docs/parallelism.md §3.3.2).
		s.perParam = true
		// The reduce dtype: the mixed-precision policy's (fsdp-bf16: fp32),
		// else the gradients' own (LoRA's fp32 adapters over a bf16 base).
		var policy int64
		if s.cfg.master != s.cfg.param {
			policy = s.cfg.master
		}
		s.units = fsdpUnits(ins, s.cfg.dp, s.degree, s.expertUnit, s.perParam, policy)
		s.unitOf = map[*tensor]*fsdpUnit{}
		for _, u := range s.units {
			for _, p := range u.params {
				s.unitOf[p] = u
			}
		}
	}
	if s.hostWrap {
		s.wrapFromHost()
	}
}

// WrapsWhole reports whether t's FSDP2 wraps a model whose whole
// parameters reach the GPU before fully_shard shards them: fsdp_init host
// or gpu, ZeRO 2 or 3 over more than one data- or context-parallel rank,
// nothing offloaded, no tensor or pipeline parallelism (wrapFromHost).
// The blocks they leave are what empty_cache_after_wrap returns to the
// driver, which the tuner offers as a free change.
func WrapsWhole(t model.Training) bool {
	return t.Zero >= 2 && max(t.DP, 1)*max(t.CP, 1) > 1 && t.Offload == model.OffloadNone &&
		t.TP <= 1 && t.PP <= 1 && t.FSDPInit != model.FSDPInitMeta
}

// wrapFromHost is fully_shard over a model built on the host, unit by
// unit, the blocks first and the root last (bench/torch/dist/train.py, as
// transformers' from_pretrained and fully_shard do): each call moves its
// unit's parameters to the GPU whole (_move_states_to_device), allocates
// each one's padded shard (FSDPParam._init_sharded_param) and frees the
// whole ones when it returns; with model.Training.EmptyCacheAfterWrap
// the script empties the cache after the last (torch.cuda.empty_cache),
// else the freed whole blocks stay cached for the steps. The shards land
// among the freed whole blocks,
// which the step's first allocations then split: seen in RoBERTa's
// allocator history (bench/results/2026-11-26-h100x2-lora-3-traces).
// With model.FSDPInitGPU the whole model is on the GPU before the first
// call (model.cuda(), bench/torch/measure.py's shard()), so every shard
// is cut while all the whole parameters are still there; under expert
// parallelism that model holds every expert, and the rank keeps a copy of
// its own before fully_shard (bench/torch/dist/ep.py, as cp.py applies it;
// its allocator history, docs/parallelism.md §3.3.2).
func (s *sim) wrapFromHost() {
	done := map[*tensor]bool{}
	onGPU := map[*tensor]*tensor{} // the whole parameters on the GPU
	toGPU := func(p *tensor) {
		if onGPU[p] == nil {
			onGPU[p] = s.alloc(p.elems, s.shardDt(p), catTemp, p.name)
			onGPU[p].prefix = "whole "
		}
	}
	if s.wrapGPU {
		// model.cuda() first: every parameter whole, in the order the
		// model built them (LoRA's adapters after the whole base).
		var split []*tensor
		for _, p := range s.unsharded {
			if s.expertUnit(p) {
				// Every expert, before the rank keeps its own.
				onGPU[p] = s.alloc(p.elems*s.cfg.ep, s.shardDt(p), catTemp, p.name)
				onGPU[p].prefix = "every rank's "
				split = append(split, p)
				continue
			}
			toGPU(p)
		}
		// Expert parallelism then keeps the rank's experts, a copy of
		// its slice (bench/torch/dist/ep.py's apply:
		// Parameter(w.data[lo:hi].clone())), and the whole ones go.
		for _, p := range split {
			all := onGPU[p]
			onGPU[p] = nil
			toGPU(p)
			s.unref(all)
		}
	}
	shardUnit := func(ps []*tensor) {
		var unit []*tensor
		for _, p := range ps {
			if !done[p] {
				done[p] = true
				toGPU(p)
				unit = append(unit, p)
			}
		}
		for _, p := range unit {
			s.allocShard(p)
		}
		for _, p := range unit {
			s.unref(onGPU[p])
		}
	}
	if len(s.units) > 1 {
		for _, u := range s.units[1:] {
			shardUnit(u.params)
		}
	}
	shardUnit(s.unsharded) // the root's, and any no unit holds
	s.unsharded = nil
	if s.wrapEmpties {
		s.emptyCache()
	}
}

// paramBytes returns the bytes of the parameters outside checkpointing
// units (blocks) and the largest unit's, counting a shared (tied)
// parameter once.
func paramBytes(ins []*inst, seen map[*tensor]bool) (root, unit int64) {
	for _, in := range ins {
		var own int64
		for _, p := range in.p {
			if p != nil && !seen[p] {
				seen[p] = true
				own += p.bytes()
			}
		}
		var sub int64
		for list := range in.sublists() {
			r, u := paramBytes(list, seen)
			sub += r
			unit = max(unit, u)
		}
		if in.unit {
			unit = max(unit, own+sub)
			continue
		}
		root += own + sub
	}
	return root, unit
}

// gather allocates the gathered parameters at the start of a forward and
// releaseGathered frees them after the backward (ZeRO-2 and 3).
func (s *sim) gather() {
	if s.perParam {
		s.preForward(s.units[0]) // the root's (fsdp.go)
		return
	}
	if s.gathered > 0 && s.gatherT == nil {
		if s.units != nil {
			s.unshardAll()
		}
		s.gatherT = s.alloc(s.gathered, u8, catParam, "gathered parameters (FSDP)")
	}
}

func (s *sim) releaseGathered() {
	if s.perParam {
		s.fsdpEndBackward()
		return
	}
	if s.gatherT != nil {
		s.unref(s.gatherT)
		s.gatherT = nil
	}
}

// reduceScatter replaces a parameter's whole gradient with this rank's
// shard (ZeRO-2 and up), accumulating into the shard on later
// micro-batches. With offload the shard goes to host memory. Under
// fsdp-bf16 the reduce dtype is fp32: the bf16 gradient is copied into an
// fp32 reduce-scatter input first, and the shard is fp32.
func (s *sim) reduceScatter(t, g *tensor) {
	if s.perParam {
		// The unit's post-backward reduces its gradients together
		// (fsdp.go's postBackward): g is held until then, as the
		// unsharded parameter's .grad (t.grad). A tied weight's second
		// gradient of the pass is added into the first in place (measured:
		// Llama-3.2-1B's embedding under FSDP2, bench/results/
		// 2026-11-26-h200x4-zero3-fakepg), out of place for DTensors
		// (sumTied).
		switch u := s.unitOf[t]; {
		case t.grad == nil:
			t.grad = g
			u.grads = append(u.grads, t)
		case s.dtensor:
			t.grad = s.gradSum(t, t.grad, g, catGrad) // grads.go
		default:
			s.unref(g)
		}
		return
	}
	var in *tensor
	if s.cfg.master != g.dt {
		in = s.alloc(g.elems, s.cfg.master, catTemp, "reduce-scatter input (FSDP)")
	}
	if t.pgrad == nil {
		if s.unitOf[t] != nil {
			s.gradShard(t)
		} else if s.cfg.offload == model.OffloadNone {
			t.pgrad = s.alloc(s.shardOf(t), s.cfg.master, catGrad, "gradient shard")
		} else {
			t.pgrad = &tensor{refs: 1}
		}
	}
	s.unref(g)
	if in != nil {
		s.unref(in)
	}
}

// Ranks is how the data-parallel ranks differ: under ZeRO-1 each rank keeps
// the optimizer state of the whole parameters it owns, so one rank holds
// more than the others (docs/multigpu.md).
type Ranks struct {
	// Busiest is the rank with the most optimizer state, whose figures the
	// Result gives.
	Busiest int `json:"busiest"`
	// OptimizerBytes is each rank's optimizer state.
	OptimizerBytes []int64 `json:"optimizer_bytes"`
	// DeviceTotal is each rank's device total: the busiest rank's less the
	// optimizer state (and its step's temporaries, in proportion) it holds
	// beyond that rank.
	DeviceTotal []int64 `json:"device_total_bytes"`
	// Spread is the busiest rank's optimizer state less the least loaded
	// rank's.
	Spread int64 `json:"spread_bytes"`
}

// ranks describes the ranks of a ZeRO-1 run whose partition is uneven.
func (s *sim) ranks(r *Result) *Ranks {
	p := s.zeroPart
	if p == nil || p.Spread() == 0 {
		return nil
	}
	busiest, most := p.Busiest()
	rk := &Ranks{Busiest: busiest}
	var lo int64 = -1
	for _, n := range p.Numel {
		opt := r.OptimizerBytes * n / most
		rk.OptimizerBytes = append(rk.OptimizerBytes, opt)
		rk.DeviceTotal = append(rk.DeviceTotal, r.DeviceTotal-(r.OptimizerBytes-opt))
		if lo < 0 || opt < lo {
			lo = opt
		}
	}
	rk.Spread = r.OptimizerBytes - lo
	return rk
}

package estimate

import (
	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/model"
)

// FSDP2's side streams (docs/multigpu.md, "Recipe for the simulator"). The
// caching allocator keeps a pool per stream and a block freed on one stream
// serves only that stream, so what FSDP2 allocates on its all-gather copy-in
// and reduce-scatter streams stays reserved beside the default pool.
const (
	streamAllGather     alloc.Stream = 1 // all-gather copy-in: flat all-gather outputs
	streamReduceScatter alloc.Stream = 2 // reduce-scatter: sharded gradients
)

// fsdpUnit is one fully_shard unit: a transformer block, or the root (every
// parameter outside the blocks).
type fsdpUnit struct {
	params []*tensor
	elems  int64 // whole elements, each parameter counted once
	shard  int64 // this rank's elements: Σ ceil(elems / W) per parameter
}

// fsdpUnits groups the parameters by unit, the root first (it is gathered
// first), then the blocks in order; a shared (tied) parameter belongs to
// the first unit that holds it.
func fsdpUnits(ins []*inst, dp int64) []*fsdpUnit {
	root := &fsdpUnit{}
	units := []*fsdpUnit{root}
	seen := map[*tensor]bool{}
	var walk func(ins []*inst, u *fsdpUnit)
	walk = func(ins []*inst, u *fsdpUnit) {
		for _, in := range ins {
			own := u
			if in.unit {
				own = &fsdpUnit{}
				units = append(units, own)
			}
			for _, p := range in.p {
				if p != nil && !seen[p] {
					seen[p] = true
					own.params = append(own.params, p)
					own.elems += p.elems
					own.shard += (p.elems + dp - 1) / dp
				}
			}
			for _, list := range append([][]*inst{in.body, in.short}, in.fork...) {
				walk(list, own)
			}
		}
	}
	walk(ins, root)
	out := units[:0]
	for _, u := range units {
		if len(u.params) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// fsdpStreams says whether FSDP2's side streams are simulated: sharded
// data parallelism over more than one GPU with the states on the device.
func (s *sim) fsdpStreams() bool {
	return s.cfg.zero >= 2 && s.cfg.dp > 1 && s.cfg.offload == model.OffloadNone
}

// allocOn is alloc on a side stream.
func (s *sim) allocOn(elems, dt int64, cat category, name string, st alloc.Stream) *tensor {
	t := s.slab.tensor()
	*t = tensor{elems: elems, dt: dt, refs: 1, fixed: cat, cat: cat, name: name}
	n := t.bytes()
	t.blk = s.al.mallocOn(n, st)
	if s.trace != nil {
		s.trace(t, true)
	}
	s.live[cat] += n
	s.observe()
	return t
}

// unshardAll replays the forward's all-gathers on the copy-in stream, unit
// by unit in order: with a mixed-precision policy the flat cast of the
// shard (param dtype × shard), freed once gathered; the flat all-gather
// output (param dtype × unit), freed at the next unit's copy-out, so two
// are live at a time (the unit and the one prefetched).
func (s *sim) unshardAll() {
	var prev *tensor
	for _, u := range s.units {
		var cast *tensor
		if s.cfg.master != s.cfg.param {
			cast = s.allocOn(u.shard, s.cfg.param, catTemp, "all-gather input (FSDP)", streamAllGather)
		}
		out := s.allocOn(u.shard*s.cfg.dp, s.cfg.param, catTemp, "all-gather output (FSDP)", streamAllGather)
		s.unref(cast)
		s.unref(prev)
		prev = out
	}
	s.unref(prev)
}

// gradShard gives t its sharded gradient: the first of its unit's
// parameters to reach the reduce-scatter allocates the unit's flat
// sharded gradient on the reduce-scatter stream (reduce dtype × the unit's
// shard), and every parameter of the unit gets its slice, as FSDP2 views
// one reduce-scatter output per parameter.
func (s *sim) gradShard(t *tensor) *tensor {
	u := s.unitOf[t]
	flat := s.allocOn(u.shard, s.cfg.master, catGrad, "gradient shard", streamReduceScatter)
	for _, p := range u.params {
		if p.pgrad == nil {
			p.pgrad = s.view(flat, (p.elems+s.cfg.dp-1)/s.cfg.dp)
		}
	}
	s.unref(flat)
	return t.pgrad
}

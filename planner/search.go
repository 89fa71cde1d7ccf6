package planner

import (
	"errors"
	"fmt"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// program identifies what a layout's busiest rank runs: two layouts with
// the same program need the same memory, so the search estimates it once
// (docs/planner.md §4). The data-parallel size matters only through the
// shards (ZeRO ≥ 1) or whether DDP's buckets exist (ZeRO 0), and
// accumulation beyond two micro-batches repeats the second one, unless a
// pipeline keeps every micro-batch's buffers.
type program struct {
	group
	zero, shard, micro, accum int64
	ckpt                      model.Checkpointing
}

// group is the part of a program the dominance rules do not order.
type group struct {
	tp, pp, cp, ep, virtual int64
	sp, lp                  bool
	sched                   Schedule
}

func programOf(l Layout) program {
	p := program{group: group{l.TP, l.PP, l.CP, l.EP, l.Virtual, l.SP, l.LossParallel, l.Schedule},
		zero: l.Zero, shard: l.DP * l.CP, micro: l.Micro, accum: l.Accum, ckpt: l.Checkpointing}
	if l.Zero == 0 {
		p.shard = min(p.shard, 2)
	}
	if l.PP <= 1 {
		p.accum = min(p.accum, 2)
	}
	return p
}

// atLeast reports whether program c needs at least the memory of program
// f, by the monotonicity rules of docs/planner.md §4: at the same
// accumulation (memplan predicts less with two micro-batches than with one
// in some cases; with a pipeline, more micro-batches never need less), a
// larger micro-batch, less checkpointing, a lower ZeRO stage within DDP/ZeRO-1
// or within FSDP (stages 2 and 3), or fewer shards when both layouts are
// data-parallel, never need less; nor do smaller TP, PP, CP or EP degrees with the
// same schedule (assumed of the simulator to come: TestMonotone checks
// the rules on what the estimator simulates).
func atLeast(c, f program) bool {
	if !groupAtLeast(c.group, f.group) || c.micro < f.micro {
		return false
	}
	if c.accum != f.accum && (c.pp <= 1 || c.accum < f.accum) {
		return false
	}
	if c.ckpt != f.ckpt && c.ckpt.Mode != model.CkptNone {
		return false
	}
	// NCCL's communicators exist only with data parallelism, and FSDP's
	// side-stream pools only at stages 2 and 3 (docs/multigpu.md), so a
	// layout on one GPU may need less than a sharded one, and ZeRO-1 less
	// than FSDP: programs are ordered only within the same kind.
	if (c.shard > 1) != (f.shard > 1) || (c.zero >= 2) != (f.zero >= 2) {
		return false
	}
	return f.zero >= c.zero && f.shard >= c.shard
}

func groupAtLeast(c, f group) bool {
	if c == f {
		return true
	}
	if c.tp > f.tp || c.pp > f.pp || c.cp > f.cp || c.ep > f.ep || (c.sp && !f.sp) || (c.lp && !f.lp) {
		return false
	}
	// A pipeline's first stage holds no less than the whole model
	// without one only under 1F1B; interleaving holds more.
	return (c.sched == f.sched && c.virtual == f.virtual) || (c.pp <= 1 && f.sched == OneFOneB)
}

type outcome struct {
	mem Busiest
	err error
}

type fail struct {
	p   program
	l   Layout
	mem Busiest
}

type search struct {
	spec   *model.Spec
	oracle Oracle
	limit  int64
	memo   map[program]outcome
	fails  []fail
	fits   []program // estimated and fitting
	// dps lists each group's data-parallel sizes in the plan, ascending;
	// bisected marks the floors bisected over them (bisectDP).
	dps      map[group][]int64
	bisected map[Layout]bool
	// boundary is, for a layout with its data-parallel size zeroed, the
	// smallest size at which it fits (fitsAcrossDP); 0 when none does.
	boundary map[Layout]int64
	asked    map[group]bool
	// unsupported holds the groups whose floor the oracle cannot
	// simulate: no layout of theirs is asked again.
	unsupported map[group]error
	// counters for Stats
	evaluated, calls, pruned, notSim int
}

func newSearch(spec *model.Spec, o Oracle, limit int64) *search {
	return &search{spec: spec, oracle: o, limit: limit, memo: map[program]outcome{},
		unsupported: map[group]error{}, dps: map[group][]int64{}, bisected: map[Layout]bool{}, boundary: map[Layout]int64{}, asked: map[group]bool{}}
}

// eval returns the oracle's answer for l, once per program.
func (s *search) eval(l Layout) outcome {
	p := programOf(l)
	if o, ok := s.memo[p]; ok {
		return o
	}
	s.calls++
	m, err := s.oracle.Estimate(s.spec, l)
	o := outcome{m, err}
	s.memo[p] = o
	switch {
	case err == nil && m.DeviceTotal > s.limit:
		s.fails = append(s.fails, fail{p, l, m})
	case err == nil:
		s.fits = append(s.fits, p)
	}
	return o
}

func (s *search) dominated(l Layout) (fail, bool) {
	p := programOf(l)
	for _, f := range s.fails {
		if atLeast(p, f.p) {
			return f, true
		}
	}
	return fail{}, false
}

// judge sets c's verdict: pruned by a failing layout that needs no more,
// or from the oracle. When a layout does not fit, a layout that needs less
// is estimated too, so that a whole family that cannot fit is pruned at
// once.
func (s *search) judge(c *Candidate) {
	l := c.Layout
	g := programOf(l).group
	if err := s.unsupported[g]; err != nil {
		s.notSim++
		c.Verdict, c.Reason = NotSimulated, err.Error()
		return
	}
	if s.prune(c) {
		return
	}
	// The least each data-parallel size of l's group can need, bisected
	// over the sizes once per group: below the smallest size whose floor
	// fits, nothing fits.
	if err := s.bisectDP(l); err != nil {
		s.unsupported[g] = err
		s.notSim++
		c.Verdict, c.Reason = NotSimulated, err.Error()
		return
	}
	if s.prune(c) {
		return
	}
	// Then the least l's checkpointing and l's family need: a failure
	// there prunes more than l's own would.
	for _, x := range s.lighter(l) {
		if !s.fitsAcrossDP(x) {
			break
		}
	}
	if s.prune(c) {
		return
	}
	s.evaluated++
	o := s.eval(l)
	var ns *NotSimulatedError
	switch {
	case errors.As(o.err, &ns):
		s.notSim++
		c.Verdict, c.Reason = NotSimulated, o.err.Error()
	case o.err != nil:
		c.Verdict, c.Reason = Failed, o.err.Error()
	case o.mem.DeviceTotal <= s.limit:
		m := o.mem
		c.Verdict, c.Memory, c.Fill = Fits, &m, float64(m.DeviceTotal)/float64(s.spec.Device.Memory)
	default:
		s.over(c, o.mem, false)
		c.Reason = fmt.Sprintf("busiest rank %s, %s over the limit", units.Format(o.mem.DeviceTotal), units.Format(c.OverBytes))
		s.widen(l)
	}
}

// prune marks c over the limit when a failing layout needs no more.
func (s *search) prune(c *Candidate) bool {
	f, ok := s.dominated(c.Layout)
	if !ok {
		return false
	}
	s.pruned++
	s.over(c, f.mem, true)
	c.Reason = fmt.Sprintf("needs at least the %s of %s, %s over", units.Format(f.mem.DeviceTotal), f.l, units.Format(f.mem.DeviceTotal-s.limit))
	return true
}

// lighter returns, lightest first, l's checkpointing at micro-batch 1 with
// the most sharding and l's family at micro-batch 1.
func (s *search) lighter(l Layout) []Layout {
	mid := l
	mid.Micro = 1
	if l.DP*l.CP > 1 {
		mid.Zero = 3
	}
	family := l
	family.Micro = 1
	return []Layout{mid, family}
}

// widen follows a layout l that does not fit with layouts that need less,
// so that what cannot fit is pruned in few estimates: l's checkpointing at
// micro-batch 1 with the most sharding, then l's family at micro-batch 1,
// then, without a pipeline, a bisection of the family's micro-batches
// (which share l's accumulation class) for the largest that fits.
func (s *search) widen(l Layout) {
	fits := func(x Layout) bool {
		o := s.eval(x)
		return o.err == nil && o.mem.DeviceTotal <= s.limit
	}
	for _, x := range s.lighter(l) {
		if !s.fitsAcrossDP(x) {
			return
		}
	}
	if l.Micro == 1 || l.PP > 1 {
		return
	}
	per := l.Micro * l.Accum
	var ms []int64
	for _, m := range divisors(per) {
		if min(per/m, 2) == min(l.Accum, 2) && m > 1 && m < l.Micro {
			ms = append(ms, m)
		}
	}
	lo, hi := -1, len(ms) // ms[lo] fits (or micro-batch 1), ms[hi] does not (or l)
	for hi-lo > 1 {
		i := (lo + hi) / 2
		x := l
		x.Micro, x.Accum = ms[i], per/ms[i]
		if fits(x) {
			lo = i
		} else {
			hi = i
		}
	}
}

func (s *search) over(c *Candidate, m Busiest, bound bool) {
	c.Verdict, c.Memory, c.Bound = Over, &m, bound
	c.Fill = float64(m.DeviceTotal) / float64(s.spec.Device.Memory)
	c.OverBytes = m.DeviceTotal - s.limit
}

// floorOf is the layout of l's group and data-parallel size that needs
// the least memory by the rules of atLeast: ZeRO-3 (when there is anything
// to shard), checkpointing every block, micro-batch 1 and the fewest
// micro-batches.
func (s *search) floorOf(l Layout) Layout {
	f := l
	f.Zero, f.Micro = 0, 1
	if f.DP*f.CP > 1 {
		f.Zero = 3
	}
	f.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
	if l.PP > 1 {
		f.Accum = 1
	} else {
		f.Accum = min(l.Accum, 2)
	}
	return f
}

// bisectDP finds, for l's group and accumulation class, the smallest
// data-parallel size whose floor (floorOf) fits, by bisection over the
// group's sizes: floors fit from there up (more shards never need more),
// and the failing floors below prune everything at their size. It returns
// the oracle's *NotSimulatedError when it cannot simulate the group.
func (s *search) bisectDP(l Layout) error {
	key := s.floorOf(l)
	key.DP, key.Zero = 0, 0
	if s.bisected[key] {
		return nil
	}
	s.bisected[key] = true
	dps := s.dps[programOf(l).group]
	lo, hi := -1, len(dps) // dps[hi] fits (or none), dps[lo] fails (or none)
	for hi-lo > 1 {
		i := (lo + hi) / 2
		if hi == len(dps) {
			i = len(dps) - 1 // the largest first: it settles most groups
		}
		f := s.floorOf(l)
		f.DP, f.Zero = dps[i], 0
		if f.DP*f.CP > 1 {
			f.Zero = 3
		}
		if _, done := s.memo[programOf(f)]; !done && !s.asked[programOf(f).group] {
			// The first question to a group tells whether the oracle
			// simulates it at all.
			s.asked[programOf(f).group] = true
			var ns *NotSimulatedError
			if o := s.eval(f); errors.As(o.err, &ns) {
				return o.err
			}
		}
		if s.fitsBound(f) {
			hi = i
		} else {
			lo = i
		}
	}
	return nil
}

// fitsAcrossDP says whether x fits. With ZeRO ≥ 1 more data-parallel
// ranks never need more, so the first question about x's shape bisects
// the group's data-parallel sizes (the largest first) for the smallest at
// which it fits, and later sizes are answered from that; the failures met
// prune as usual. Without sharding it estimates x.
func (s *search) fitsAcrossDP(x Layout) bool {
	if x.Zero == 0 {
		o := s.eval(x)
		return o.err == nil && o.mem.DeviceTotal <= s.limit
	}
	key := x
	key.DP = 0
	b, ok := s.boundary[key]
	if !ok {
		var dps []int64
		for _, d := range s.dps[programOf(x).group] {
			if d*x.CP > 1 {
				dps = append(dps, d)
			}
		}
		lo, hi := -1, len(dps)
		for hi-lo > 1 {
			i := (lo + hi) / 2
			if hi == len(dps) {
				i = len(dps) - 1
			}
			y := x
			y.DP = dps[i]
			if s.fitsBound(y) {
				hi = i
			} else {
				lo = i
			}
		}
		if hi < len(dps) {
			b = dps[hi]
		}
		s.boundary[key] = b
	}
	return b > 0 && x.DP >= b
}

// fitsBound answers whether x fits from what is known, estimating it only
// when no failure needs no more than x and no fitting layout needs at
// least as much.
func (s *search) fitsBound(x Layout) bool {
	p := programOf(x)
	if o, ok := s.memo[p]; ok {
		return o.err == nil && o.mem.DeviceTotal <= s.limit
	}
	for _, f := range s.fails {
		if atLeast(p, f.p) {
			return false
		}
	}
	for _, f := range s.fits {
		if atLeast(f, p) {
			return true
		}
	}
	o := s.eval(x)
	return o.err == nil && o.mem.DeviceTotal <= s.limit
}

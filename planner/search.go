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
	// to is ZeRO 3's reshard_after_forward=N (Layout.ReshardTo; 0: all).
	to   int64
	ckpt model.Checkpointing
	// padded says that FSDP (stage 2 or 3) shards a block's experts over
	// more ranks than it has experts (model.Model.ShardedExpertRows):
	// each shard is padded, and more shards then need more memory.
	padded bool
}

// group is the part of a program the dominance rules do not order.
type group struct {
	tp, pp, cp, ep, virtual int64
	sp, lp                  bool
	sched                   Schedule
}

// programOf is l's program for a model whose blocks have experts experts
// (0: none), sharded by FSDP2 as fsdpExperts says (model.ExpertsPadded).
func programOf(l Layout, experts int64, fsdpExperts string) program {
	p := program{group: group{l.TP, l.PP, l.CP, l.EP, l.Virtual, l.SP, l.LossParallel, l.Schedule},
		zero: l.Zero, to: l.ReshardTo, shard: l.DP * l.CP, micro: l.Micro, accum: l.Accum, ckpt: l.Checkpointing,
		padded: model.ExpertsPadded(experts, &model.Training{DP: l.DP, CP: l.CP, TP: l.TP, Zero: l.Zero, FSDPExperts: fsdpExperts})}
	if l.Zero == 0 {
		p.shard = min(p.shard, 2)
	}
	if l.PP <= 1 {
		p.accum = min(p.accum, 2)
	}
	return p
}

// atLeast reports whether program c needs at least the memory of program
// f, by the monotonicity rules of docs/planner.md §4, within one group
// (the same tp, pp, cp, ep, sp, loss parallelism and schedule: across
// groups the simulator is not monotone, as tensor parallelism loads the
// whole model first). At the same accumulation (memplan predicts less with
// two micro-batches than with one in some cases; with a pipeline, more
// micro-batches never need less), a larger micro-batch, less
// checkpointing, a lower ZeRO stage within DDP/ZeRO-1 or within FSDP
// (stages 2 and 3), or fewer shards when both layouts are data-parallel,
// never need less — but for f's shards past a block's experts (padded),
// where more shards need more. TestMonotone checks the rules against the
// estimator.
func atLeast(c, f program) bool {
	if c.group != f.group || c.micro < f.micro || f.padded {
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
	return sharded(f) >= sharded(c) && f.shard >= c.shard
}

// sharded orders how much a program's ZeRO stage shards, for atLeast:
// within DDP/ZeRO-1 and within FSDP a higher stage never needs more, and
// ZeRO 3 resharded to N ranks lies between stages 2 and 3, a larger N
// nearer 3 (each unit keeps 1/N of its parameters from its forward to its
// backward; docs/multigpu.md, "Resharding to N ranks").
func sharded(p program) float64 {
	if p.zero == 3 && p.to > 1 {
		return 3 - 1/float64(p.to)
	}
	return float64(p.zero)
}

// Screener is implemented by an Oracle that can say, without estimating,
// which layouts it does not simulate. The search asks it first, so that
// those layouts cost nothing and the layouts it probes are ones the
// oracle can answer.
type Screener interface {
	// Simulates returns a *NotSimulatedError for a layout the oracle
	// cannot simulate, and nil otherwise.
	Simulates(spec *model.Spec, l Layout) error
}

// Canonicalizer is implemented by an Oracle that gives some layouts the
// same answer as another, simpler one (Simulator: FSDP's stages 2 and 3
// under a pipeline). The search estimates the canonical layout once for
// all of them.
type Canonicalizer interface {
	// Canonical returns the layout whose answer is l's.
	Canonical(l Layout) Layout
}

// Bounder is implemented by an Oracle that can bound its answers from
// below without estimating (Simulator: stateBound). The search rejects a
// layout whose bound is over the limit without asking the oracle.
type Bounder interface {
	// LowerBound returns, for spec, a function that gives a layout's
	// lower bound of the busiest rank's device total and what it counts.
	LowerBound(spec *model.Spec) func(Layout) (bytes int64, why string)
}

// Stopper is implemented by an Oracle that can stop estimating a layout
// once it knows the busiest rank needs more than a given device total
// (Simulator: estimate.Options.StopAbove). The search gives a level a
// little over the limit (stopLevel), so that a layout far over it costs
// only the simulation up to where it passes that level.
type Stopper interface {
	// EstimateAbove is Oracle.Estimate, which may stop once the busiest
	// rank's device total is above above, with Busiest.Stopped set.
	EstimateAbove(spec *model.Spec, l Layout, above int64) (Busiest, error)
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

// search judges layouts in rank order (docs/planner.md §4): a layout the
// oracle does not simulate is said so; one whose lower bound (Bounder)
// is over the limit, or that needs at least the memory of a layout already
// over it, is over without an estimate; otherwise the lightest layouts of
// its family are estimated first, then the layout itself.
type search struct {
	spec   *model.Spec
	oracle Oracle
	screen Screener // nil when the oracle is not one
	stop   Stopper  // nil when the oracle is not one
	limit  int64
	bound  func(Layout) (int64, string)
	canon  Canonicalizer // nil when the oracle is not one
	memo   map[program]outcome
	fails  map[group][]fail
	fits   map[group][]program
	// experts is a block's experts (0: none), past which FSDP pads their
	// shards (program.padded).
	experts int64
	// counters for Stats
	evaluated, calls, pruned, notSim int
	// progress is told of each estimate before it is made (Plan fills in
	// what the search does not know).
	progress func(Progress)
}

func newSearch(spec *model.Spec, o Oracle, limit int64) *search {
	s := &search{spec: spec, oracle: o, limit: limit, memo: map[program]outcome{},
		fails: map[group][]fail{}, fits: map[group][]program{},
		experts: spec.Model.ShardedExpertRows(&model.Training{})}
	s.screen, _ = o.(Screener)
	s.stop, _ = o.(Stopper)
	s.canon, _ = o.(Canonicalizer)
	s.bound = func(Layout) (int64, string) { return 0, "" }
	if b, ok := o.(Bounder); ok {
		s.bound = b.LowerBound(spec)
	}
	return s
}

// programOf is l's program, of its canonical layout when the oracle
// gives one.
func (s *search) programOf(l Layout) program {
	if s.canon != nil {
		l = s.canon.Canonical(l)
	}
	return programOf(l, s.experts, s.spec.Training.FSDPExperts)
}

func (s *search) screened(l Layout) error {
	if s.screen == nil {
		return nil
	}
	return s.screen.Simulates(s.spec, l)
}

func (s *search) fitsIn(o outcome) bool { return o.err == nil && o.mem.DeviceTotal <= s.limit }

// eval returns the oracle's answer for l, once per program.
func (s *search) eval(l Layout) outcome {
	p := s.programOf(l)
	if o, ok := s.memo[p]; ok {
		return o
	}
	s.calls++
	if s.progress != nil {
		s.progress(Progress{Estimates: s.calls, Layout: l})
	}
	var m Busiest
	var err error
	if s.stop != nil {
		m, err = s.stop.EstimateAbove(s.spec, l, stopLevel(s.limit))
	} else {
		m, err = s.oracle.Estimate(s.spec, l)
	}
	o := outcome{m, err}
	s.memo[p] = o
	switch {
	case err == nil && m.DeviceTotal > s.limit:
		s.fails[p.group] = append(s.fails[p.group], fail{p, l, m})
	case err == nil:
		s.fits[p.group] = append(s.fits[p.group], p)
	}
	return o
}

// dominanceFloor is the least a layout that needs at least the memory of
// one of program p predicted at m by atLeast is taken to need: the
// simulator is monotone by those rules only up to the caching allocator's
// reuse of blocks, which TestMonotone finds to be under 5% (a micro-batch
// of 2 can reserve less than one of 1), and under 10% under FSDP2: a
// pipeline's last stage with two micro-batches maps a segment for its
// step-end reduce that four micro-batches do not (7.2%), and a model
// sharded from the host keeps the freed whole parameters' holes among
// its shards, which a micro-batch of 1 can fragment more than one of 2
// (5.6%, Llama dp4 ZeRO-3 checkpointed; docs/multigpu.md).
func dominanceFloor(m int64, p program) int64 { return m - m*floorPercent(p)/100 }

// stopLevel is the device total above which an estimate may stop
// (Stopper): nearPercent above the limit. A layout over the limit by less
// is estimated whole, so the near misses closest to fitting carry exact
// figures; one further over costs only its simulation up to that level,
// and prunes by dominance where its stopped total, less the allowance
// (dominanceFloor), is still over the limit. Stopping at the dominance
// level itself (the limit over one less the allowance) kept more
// pruning but estimated every layout up to 11% over whole: the 70B
// amp-bf16 plan took 16.7 s against 12.6 (docs/performance.md, fifteenth
// session).
func stopLevel(limit int64) int64 {
	return limit + limit*nearPercent/100
}

// nearPercent is how far over the limit, in percent, a layout is
// estimated whole (stopLevel).
const nearPercent = 3

// floorPercent is dominanceFloor's allowance for program p, in percent.
func floorPercent(p program) int64 {
	if p.zero >= 2 {
		return 10
	}
	return 5
}

// dominated returns a failing layout that l needs at least as much as,
// by enough to be over the limit too.
func (s *search) dominated(l Layout) (fail, bool) {
	p := s.programOf(l)
	for _, f := range s.fails[p.group] {
		if dominanceFloor(f.mem.DeviceTotal, f.p) > s.limit && atLeast(p, f.p) {
			return f, true
		}
	}
	return fail{}, false
}

// known answers whether l fits from what is known: its own estimate, a
// failing layout it needs at least as much as, a fitting layout that
// needs at least as much as it, or its lower bound.
func (s *search) known(l Layout) (fits, ok bool) {
	p := s.programOf(l)
	if o, done := s.memo[p]; done {
		return s.fitsIn(o), o.err == nil
	}
	if lb, _ := s.bound(l); lb > s.limit {
		return false, true
	}
	if _, bad := s.dominated(l); bad {
		return false, true
	}
	for _, f := range s.fits[p.group] {
		if atLeast(f, p) {
			return true, true
		}
	}
	return false, false
}

// probe says whether x fits, estimating it when nothing known settles it
// and the oracle simulates it; ok is false when it stays unknown.
func (s *search) probe(x Layout) (fits, ok bool) {
	if fits, ok := s.known(x); ok {
		return fits, true
	}
	if s.screened(x) != nil {
		return false, false
	}
	o := s.eval(x)
	return s.fitsIn(o), o.err == nil
}

// judge sets c's verdict.
func (s *search) judge(c *Candidate) {
	l := c.Layout
	// The lower bound first: a layout that cannot fit whatever its
	// simulation would say is over, not "not yet simulated".
	if lb, why := s.bound(l); lb > s.limit {
		s.pruned++
		s.over(c, Busiest{RankMemory: RankMemory{Kind: All, DeviceTotal: lb}}, true)
		c.Reason = fmt.Sprintf("%s, %s over", why, units.Format(c.OverBytes))
		return
	}
	if err := s.screened(l); err != nil {
		s.notSim++
		c.Verdict, c.Reason = NotSimulated, err.Error()
		return
	}
	if s.prune(c) {
		return
	}
	// The lightest layouts of l's family first: when one does not fit,
	// neither does l, nor the rest of the family. Only for an oracle
	// that cannot stop: where a layout over the limit costs only the
	// simulation up to the stop level, a probe that fits (a whole
	// estimate) costs more than the failures it saves (docs/planner.md §4).
	if s.stop == nil {
		for _, x := range s.lighter(l) {
			if fits, ok := s.probe(x); ok && !fits {
				break
			}
		}
		if s.prune(c) {
			return
		}
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
	case o.mem.Stopped:
		s.over(c, o.mem, true)
		c.Reason = fmt.Sprintf("busiest rank above %s (its simulation stopped there), at least %s over the limit", units.Format(o.mem.DeviceTotal), units.Format(c.OverBytes))
		s.bisect(l)
	default:
		s.over(c, o.mem, false)
		c.Reason = fmt.Sprintf("busiest rank %s, %s over the limit", units.Format(o.mem.DeviceTotal), units.Format(c.OverBytes))
		s.bisect(l)
	}
}

// prune marks c over the limit when a failing layout needs no more, and
// c's own answer is not known already (a probe may have estimated it).
func (s *search) prune(c *Candidate) bool {
	if _, known := s.memo[s.programOf(c.Layout)]; known {
		return false
	}
	f, ok := s.dominated(c.Layout)
	if !ok {
		return false
	}
	s.pruned++
	least := dominanceFloor(f.mem.DeviceTotal, f.p)
	s.over(c, Busiest{RankMemory: RankMemory{Kind: f.mem.Kind, DeviceTotal: least}, Stopped: f.mem.Stopped}, true)
	needs := "needs"
	if f.mem.Stopped {
		needs = "passed"
	}
	c.Reason = fmt.Sprintf("needs at least %s (%s %s %s, less %d%%), %s over", units.Format(least), f.l, needs, units.Format(f.mem.DeviceTotal), floorPercent(f.p), units.Format(c.OverBytes))
	return true
}

// fewestMicrobatches is the fewest micro-batches l's schedule runs: pp
// for 1F1B and interleaving, 1 for GPipe.
func fewestMicrobatches(l Layout) int64 {
	if l.Schedule == GPipe {
		return 1
	}
	return l.PP
}

// lighter returns, lightest first, the layouts of l's family that need no
// more than l by atLeast: the floor (every block checkpointed, the
// highest ZeRO stage of l's kind, the smallest micro-batch of l's
// accumulation class, or with a pipeline the fewest micro-batches), then
// l's own checkpointing and ZeRO stage there. They need not reach the
// global batch: they are probes.
func (s *search) lighter(l Layout) []Layout {
	low := l
	switch {
	case l.PP <= 1 && l.Accum > 1:
		per := l.Micro * l.Accum
		low.Micro, low.Accum = 1, per
	case l.PP > 1:
		// A pipeline's fewest micro-batches: cheaper to replay, and a
		// failure there prunes every accumulation of the micro-batch.
		low.Accum = min(l.Accum, fewestMicrobatches(l))
	}
	floor := low
	floor.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
	switch {
	case l.Zero >= 2:
		floor.Zero, floor.ReshardTo = 3, 0
	case l.DP*l.CP > 1:
		floor.Zero = 1
	}
	var out []Layout
	for _, x := range []Layout{floor, low} {
		if x != l && (len(out) == 0 || out[0] != x) {
			out = append(out, x)
		}
	}
	return out
}

// bisect follows a layout l that does not fit, without a pipeline, with a
// bisection of its family's smaller micro-batches (of l's accumulation
// class) for the largest that fits, so that the family's larger ones are
// pruned by the smallest that does not. Only for an oracle that cannot
// stop early, as the family's probes in judge: where a failing layout
// costs only its simulation up to the stop level, the bisection's probes
// that fit (whole estimates of layouts the ranking may never reach) cost
// more than the failures they save (docs/planner.md §4).
func (s *search) bisect(l Layout) {
	if s.stop != nil || l.Micro == 1 || l.PP > 1 || l.Accum == 1 {
		return
	}
	per := l.Micro * l.Accum
	var ms []int64
	for _, m := range divisors(per) {
		if per/m >= 2 && m > 1 && m < l.Micro {
			ms = append(ms, m)
		}
	}
	lo, hi := -1, len(ms) // ms[lo] fits (or micro-batch 1), ms[hi] does not (or l)
	for hi-lo > 1 {
		i := (lo + hi) / 2
		x := l
		x.Micro, x.Accum = ms[i], per/ms[i]
		fits, ok := s.probe(x)
		if !ok {
			return
		}
		if fits {
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

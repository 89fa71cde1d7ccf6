package planner

import (
	"github.com/memplan/memplan/model"
)

// divisors returns n's divisors in increasing order.
func divisors(n int64) []int64 {
	var lo, hi []int64
	for d := int64(1); d*d <= n; d++ {
		if n%d == 0 {
			lo = append(lo, d)
			if d != n/d {
				hi = append([]int64{n / d}, hi...)
			}
		}
	}
	return append(lo, hi...)
}

// pow2Upto returns 1, 2, 4, … up to n.
func pow2Upto(n int64) []int64 {
	var out []int64
	for v := int64(1); v <= n; v *= 2 {
		out = append(out, v)
	}
	return out
}

// minCPTokens is the fewest tokens of a sequence a context-parallel rank
// is given: below it attention's blocks are too small to hide the key/
// value exchange (docs/planner.md §2).
const minCPTokens = 1024

// gpuOK says whether a layout of g GPUs is one the request allows: exactly
// GPUs, or at most MaxGPUs using whole nodes once it spans more than one.
func (r *Request) gpuOK(g int64) bool {
	if r.GPUs > 0 {
		return g == r.GPUs
	}
	return g <= r.MaxGPUs && (g <= r.NodeSize || g%r.NodeSize == 0)
}

func (r *Request) maxGPUs() int64 {
	if r.GPUs > 0 {
		return r.GPUs
	}
	return r.MaxGPUs
}

// enumerate calls visit with every layout the request allows, valid or
// not (docs/planner.md §2 lists the ranges).
func (r *Request) enumerate(spec *model.Spec, visit func(Layout)) {
	m := &spec.Model
	tps, pps, cps, eps := []int64{1}, []int64{1}, []int64{1}, []int64{1}
	// Sequence parallelism beside TP always; context parallelism where the
	// model's program can split its sequence (model.SeqSplitRefusal).
	if transformer(m) {
		tps = divisors(r.NodeSize)
		pps = pow2Upto(min(m.NumLayers+2, r.maxGPUs()))
		if m.SeqSplitRefusal(&model.Training{CP: 2}) == "" {
			cps = pow2Upto(max(spec.Training.Seq/minCPTokens, 1))
		}
		if m.Experts > 0 && epRefused(m) == "" {
			eps = pow2Upto(m.Experts)
		}
	}
	limit := r.maxGPUs()
	for _, dp := range divisors(r.GlobalBatch) {
		for _, tp := range tps {
			for _, cp := range cps {
				for _, pp := range pps {
					if dp*tp*cp*pp > limit || !r.gpuOK(dp*tp*cp*pp) {
						continue
					}
					base := Layout{DP: dp, TP: tp, PP: pp, CP: cp, SP: tp > 1, LossParallel: tp > 1}
					for _, ep := range eps {
						base.EP = ep
						r.variants(base, visit)
					}
				}
			}
		}
	}
}

// variants enumerates a mesh's ZeRO stages, checkpointing modes, schedules
// and batch splits.
func (r *Request) variants(base Layout, visit func(Layout)) {
	type sched struct {
		s Schedule
		v int64
	}
	scheds := []sched{{"", 0}}
	if base.PP > 1 {
		scheds = []sched{{OneFOneB, 1}, {Interleaved, 2}}
	}
	per := r.GlobalBatch / base.DP
	for _, z := range r.Zero {
		if z > 0 && base.DP*base.CP == 1 {
			continue
		}
		tos := []int64{0}
		if n := r.reshardTo(base); z == 3 && n > 0 {
			tos = append(tos, n)
		}
		for _, to := range tos {
			for _, ck := range r.Checkpointing {
				for _, sc := range scheds {
					for _, mb := range divisors(per) {
						l := base
						l.Zero, l.ReshardTo, l.Checkpointing, l.Schedule, l.Virtual = z, to, ck, sc.s, sc.v
						l.Micro, l.Accum = mb, per/mb
						visit(l)
					}
				}
			}
		}
	}
}

// reshardTo is the N of ZeRO 3 resharded to N ranks the planner offers
// for mesh base, or 0: the GPUs of one node, when the data-parallel group
// spans more than one node and model.ReshardError allows it (not beside
// tensor parallelism, which torch 2.11 refuses, nor with a pipeline,
// context or expert parallelism).
func (r *Request) reshardTo(base Layout) int64 {
	n := r.NodeSize
	t := model.Training{DP: base.DP, Zero: 3, TP: base.TP, PP: base.PP, CP: base.CP, EP: base.EP, ReshardAfterForward: n}
	if n < 2 || base.DP <= n || model.ReshardError(&t) != nil {
		return 0
	}
	return n
}

// epRefused is why no expert-parallel layout of m is enumerated although
// it has experts (model.Model.EPRefusal: Llama 4's dense experts), or "".
// Plan says so in Result.Skipped.
func epRefused(m *model.Model) string {
	if m.Experts == 0 {
		return ""
	}
	return m.EPRefusal()
}

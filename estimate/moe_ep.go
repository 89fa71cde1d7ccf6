package estimate

import (
	"fmt"
	"math"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/model"
)

// Expert parallelism, one rank's program (docs/moe.md §4): the rank holds
// E/ep experts of every block (moeOp's fused weights are sized for them),
// routes its own tokens with the whole router, sends each routed row to
// the rank that holds its expert (all-to-all dispatch), runs its local
// experts over the rows it receives, and sends the results back
// (all-to-all combine). The rows the busiest rank receives are the
// balanced share times a skew allowance (epRows).

// localExperts is the number of experts of a block on one rank.
func (s *sim) localExperts(experts int64) int64 { return experts / s.cfg.ep }

// epRows is R, the rows the busiest rank receives for n = tokens·k routed
// pairs per rank: n (balanced routing) times the skew allowance, ep_skew
// or by default min(ep, 3) (docs/moe.md §3–4: random-init routing measured
// up to 2.92× at ep 8), at most every pair of every rank.
func (s *sim) epRows(tokens, k int64) int64 {
	n := tokens * k
	r := busiestRows(n, s.cfg.ep, s.cfg.epSkew)
	switch s.cfg.epRole {
	case epBalanced:
		return n
	case epSending:
		return sendingRows(n, s.cfg.ep, r)
	}
	s.note(fmt.Sprintf("expert parallelism: the busiest rank is taken to receive %d routed rows per MoE block, %.3g× the balanced %d (--ep-skew; docs/moe.md §4)",
		r, float64(r)/float64(n), n))
	if !s.al.use(alloc.Default()).Config().ExpandableSegments {
		// Rows that change from step to step leave cached blocks that do
		// not fit the next step's requests (measured: DeepSeek-V2's cut,
		// one rank of two +9% reserved in one of two runs, docs/moe.md §11).
		s.note("expert parallelism: the routed rows change from step to step, and the caching allocator may reserve more than this as its cached blocks stop fitting them; expandable_segments:True (--alloc-conf), which maps and unmaps pages as blocks grow and go, is the usual remedy (not measured for this case)")
	}
	return r
}

// busiestRows is R for n routed pairs per rank over ep ranks at skew
// allowance skew (0: the default, min(ep, 3)): n times it, at most every
// pair of every rank.
func busiestRows(n, ep int64, skew float64) int64 {
	if skew == 0 {
		skew = min(float64(ep), defaultEPSkew)
	}
	return min(int64(math.Ceil(float64(n)*skew)), ep*n)
}

// sendingRows is what each other rank of the group receives when the
// busiest receives r of the group's ep·n pairs: the rest, shared evenly
// (none under the worst case, r = ep·n).
func sendingRows(n, ep, r int64) int64 { return (ep*n - r) / (ep - 1) }

// defaultEPSkew caps the default skew allowance: the largest busiest-rank
// share measured with random router weights was 2.92× balanced
// (bench/results/moe-traces, docs/moe.md §3).
const defaultEPSkew = 3

// expertsEP is groupedExperts with the experts on ep ranks: the sorted
// rows are the dispatch all-to-all's send buffer; the local experts run on
// the R received rows (regrouped by local expert); their outputs go back
// by the combine all-to-all and are weighted, reordered and summed as on
// one GPU.
func (s *sim) expertsEP(o *moeOp, x, w, idx *tensor, rows int64) *tensor {
	k := o.k
	n := rows * k.TopK
	r := s.epRows(rows, k.TopK)
	eg, perm := s.sortExperts(n)
	pk := s.alloc(n, i64, catTemp, "perm // top_k")
	send := s.gatherRows(x, pk, n, k.Dim, "all-to-all send (dispatch)")
	s.unref(pk)
	wg := s.gatherRows(w, perm, n, 1, "sample_weights_g")
	recv := s.allToAll(send, r*k.Dim, "all-to-all receive (dispatch)", true)
	s.unref(send)
	lp := s.alloc(r, i64, catTemp, "local expert perm")
	rg := s.gatherRows(recv, lp, r, k.Dim, "received rows (by local expert)")
	s.unref(recv)
	hi, tpe, offs, mask := s.groupOffsets(r, s.localExperts(k.Experts))
	b1 := s.expertBias(o.gateUpB, hi, r, 2*k.Hidden)
	out, b2 := s.expertMLP(o, rg, mask, hi, r, b1)
	s.unref(b2)
	s.unref(rg)
	ilp := s.alloc(r, i64, catTemp, "local expert inverse perm")
	back := s.gatherRows(out, ilp, r, k.Dim, "all-to-all send (combine)")
	s.unref(out)
	comb := s.allToAll(back, n*k.Dim, "all-to-all receive (combine)", false)
	s.unref(back)
	sc := s.broadcastMul(comb, wg)
	s.unref(comb)
	rr, inv := s.restore(sc, perm, n)
	s.unref(sc)
	y := s.sumTopK(rr, rows*k.Dim, x.dt)
	for _, t := range []*tensor{eg, perm, wg, lp, hi, tpe, offs, mask, ilp, inv, rr} {
		s.unref(t)
	}
	return y
}

// allToAll is all_to_all_single into a new buffer of outElems: nothing is
// saved; its backward is the reverse all-to-all, which allocates the
// gradient of the input (a buffer of the input's size). With copyIn (the
// dispatch, whose output the local experts' regrouping gathers) the
// backward first receives a copy of its incoming gradient, the original
// freed (measured in rank 0's history, bench/results/2026-11-26-h200x4-ep-fsdp-snapshots;
// the combine's backward gets none).
func (s *sim) allToAll(x *tensor, outElems int64, name string, copyIn bool) *tensor {
	y := s.alloc(outElems, x.dt, catTemp, name)
	if n := s.record("AllToAll", []*tensor{x}, y); n != nil && copyIn {
		n.copyIn = true
	}
	return y
}

// epRole is the kind of expert-parallel rank a simulation is for.
type epRole int8

const (
	epReceiving epRole = iota // the busiest share of the routed rows (--ep-skew)
	epBalanced                // the balanced share
	epSending                 // the rest of the group's rows, shared evenly
)

// ExpertRanks gives the kinds of rank of an expert-parallel run whose
// routing is skewed: the rank that receives the busiest share of the
// routed rows, a rank that receives the balanced share, and the others,
// which receive the rest. The first holds the most activations, but the
// others can reserve more (measured: with every pair routed to one rank,
// the ranks that receive none reserved 7.5% more than it; under random
// routing at a share of 1.26 both ranks reserved what the balanced rank
// does, 2–3% more than either extreme; bench/results/2026-11-26-h200x4-ep-fsdp-snapshots,
// 2026-11-26-h200x4-ep-fsdp-heldout-2.jsonl). The Result's figures are the
// kind with the largest device total's.
type ExpertRanks struct {
	// Busiest is the kind the Result's figures are for.
	Busiest string       `json:"busiest"`
	Kinds   []ExpertRank `json:"kinds"`
}

// ExpertRank is one kind of expert-parallel rank: "receiving" (the
// busiest share, --ep-skew), "balanced" or "sending" (the rest of the
// group's rows, shared evenly).
type ExpertRank struct {
	Kind          string `json:"kind"`
	PeakAllocated int64  `json:"peak_allocated_bytes"`
	PeakReserved  int64  `json:"peak_reserved_bytes"`
	DeviceTotal   int64  `json:"device_total_bytes"`
}

// estimateExperts simulates an expert-parallel rank that receives the
// busiest share of the routed rows and, when the skew allowance is above
// one, a rank that receives the balanced share and one that receives the
// rest, and returns the one with the largest device total, with every
// kind in Experts.
func estimateExperts(spec *model.Spec, inspect func(*sim), setup func(*sim)) (*Result, error) {
	return busiestExpertRank(spec, func(role func(*sim)) (*Result, error) {
		return simulateRank(spec, inspect, func(s *sim) {
			if setup != nil {
				setup(s)
			}
			role(s)
		})
	})
}

// busiestExpertRank runs simulate for the receiving rank and, when the skew
// allowance is above one, the balanced and the sending ones (role sets
// the kind on the simulation), and returns the result with the largest
// device total, with every kind in Experts: estimateExperts's choice, and
// each pipeline stage's under expert parallelism (stages.go).
func busiestExpertRank(spec *model.Spec, simulate func(role func(*sim)) (*Result, error)) (*Result, error) {
	recv, err := simulate(func(*sim) {})
	if err != nil || spec.Training.EPSkew == 1 || recv.Stopped {
		return recv, err
	}
	ranks := &ExpertRanks{Busiest: "receiving", Kinds: []ExpertRank{expertRank("receiving", recv)}}
	best := recv
	for _, k := range []struct {
		role epRole
		name string
	}{{epBalanced, "balanced"}, {epSending, "sending"}} {
		r, err := simulate(func(s *sim) { s.cfg.epRole = k.role })
		if err != nil {
			return nil, err
		}
		ranks.Kinds = append(ranks.Kinds, expertRank(k.name, r))
		if r.DeviceTotal > best.DeviceTotal {
			ranks.Busiest, best = k.name, r
		}
	}
	if best != recv {
		best.Notes = append(recv.Notes, fmt.Sprintf("expert parallelism: a %s rank reaches a larger device total than the busiest receiver; the figures are its (every kind: experts in --format json)", ranks.Busiest))
	}
	best.Experts = ranks
	return best, nil
}

func expertRank(name string, r *Result) ExpertRank {
	return ExpertRank{Kind: name, PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved, DeviceTotal: r.DeviceTotal}
}

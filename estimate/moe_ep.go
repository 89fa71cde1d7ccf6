package estimate

import (
	"fmt"
	"math"
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
	ep, skew := s.cfg.ep, s.cfg.epSkew
	if skew == 0 {
		skew = min(float64(ep), defaultEPSkew)
	}
	n := tokens * k
	r := min(int64(math.Ceil(float64(n)*skew)), ep*n)
	s.note(fmt.Sprintf("expert parallelism: the busiest rank is taken to receive %d routed rows per MoE block, %.3g× the balanced %d (--ep-skew; docs/moe.md §4)",
		r, float64(r)/float64(n), n))
	return r
}

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
	out := s.expertMLP(o, rg, mask, hi, r)
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
	y := s.sumTopK(rr, rows*k.Dim)
	for _, t := range []*tensor{eg, perm, wg, lp, hi, tpe, offs, mask, ilp, inv, rr} {
		s.unref(t)
	}
	return y
}

// allToAll is all_to_all_single into a new buffer of outElems: nothing is
// saved; its backward is the reverse all-to-all, which allocates the
// gradient of the input (a buffer of the input's size).
func (s *sim) allToAll(x *tensor, outElems int64, name string, copyIn bool) *tensor {
	y := s.alloc(outElems, x.dt, catTemp, name)
	if n := s.record("AllToAll", []*tensor{x}, y); n != nil && copyIn {
		n.copyIn = true
	}
	return y
}

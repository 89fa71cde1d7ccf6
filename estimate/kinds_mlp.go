package estimate

import "github.com/memplan/memplan/model"

// Gated MLPs and mixtures of experts.

func init() {
	register(model.KGatedMLP, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.GatedMLP)
		return &gatedMLPOp{k, s.mlpParams(k.Dim, k.Hidden, k.Bias, &mlpNames)}
	})
	register(model.KMoE, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.MoE)
		o := &moeOp{k: k, router: s.matrix(k.Experts, k.Dim, 1, "router.weight")}
		o.experts = make([]mlpParams, k.Experts)
		for e := range o.experts {
			o.experts[e] = s.mlpParams(k.Dim, k.Hidden, k.Bias, &expertNames)
		}
		if k.Shared > 0 {
			o.shared = s.mlpParams(k.Dim, k.Shared, false, &sharedNames)
			if k.SharedGate {
				o.sharedGate = s.matrix(1, k.Dim, 1, "shared_expert_gate")
			}
		}
		return o
	})
}

// mlpParams are a gated MLP's weights, each with its bias (or nil).
type mlpParams struct {
	gate, gateB, up, upB, down, downB *tensor
}

// mlpParams allocates them in the order the module registers them. names
// are the six tensors' names (mlpNames, expertNames, sharedNames).
func (s *sim) mlpParams(dim, hidden int64, bias bool, names *[6]string) mlpParams {
	var p mlpParams
	p.gate, p.gateB = s.matrix(hidden, dim, 1, names[0]), s.optParam(bias, hidden, names[1])
	p.up, p.upB = s.matrix(hidden, dim, 1, names[2]), s.optParam(bias, hidden, names[3])
	p.down, p.downB = s.matrix(dim, hidden, 1, names[4]), s.optParam(bias, dim, names[5])
	return p
}

var (
	mlpNames    = [6]string{"gate.weight", "gate.bias", "up.weight", "up.bias", "down.weight", "down.bias"}
	expertNames = [6]string{"expert.gate", "expert.gate.bias", "expert.up", "expert.up.bias", "expert.down", "expert.down.bias"}
	sharedNames = [6]string{"shared.gate", "", "shared.up", "", "shared.down", ""}
)

type gatedMLPOp struct {
	k *model.GatedMLP
	p mlpParams
}

func (o *gatedMLPOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	return s.gatedMLP(x, &o.p, s.rows(sh), o.k.Hidden, o.k.Dim, o.k.Activation)
}

// gatedMLP is down(act(gate(x)) * up(x)) over rows.
func (s *sim) gatedMLP(x *tensor, p *mlpParams, rows, hidden, dim int64, act string) *tensor {
	g := s.matmul(x, p.gate, p.gateB, rows, hidden)
	a := s.activation(act, g, false)
	s.unref(g)
	u := s.matmul(x, p.up, p.upB, rows, hidden)
	m := s.mul(a, u)
	s.unref(a)
	s.unref(u)
	y := s.matmul(m, p.down, p.downB, rows, dim)
	s.unref(m)
	return y
}

type moeOp struct {
	k          *model.MoE
	router     *tensor
	experts    []mlpParams
	shared     mlpParams // gate is nil without a shared expert
	sharedGate *tensor
}

// forward is a mixture-of-experts MLP as transformers' eager loop runs it
// (MixtralSparseMoeBlock and its Qwen variants): a router, an fp32
// softmax, top-k, a one-hot int64 mask, then for each expert the rows
// routed to it are gathered, pass its gated MLP, are scaled by their
// routing weight and index_add_-ed into the output. Routing is taken as
// balanced: each expert gets rows·top_k/experts rows. Not yet measured
// (docs/formulas.md §B).
func (o *moeOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	k, rows := o.k, s.rows(sh)
	logits := s.matmul(x, o.router, nil, rows, k.Experts)
	l32 := s.to(logits, f32)
	s.unref(logits)
	probs := s.unary("Softmax", l32, false, true)
	s.unref(l32)
	w := s.alloc(rows*k.TopK, f32, catTemp, "topk weights")
	idx := s.alloc(rows*k.TopK, i64, catTemp, "topk indices")
	if n := s.record("Topk", []*tensor{probs}, w); n != nil {
		s.save(n, idx)
	}
	s.unref(probs)
	wc := s.to(w, x.dt)
	s.unref(w)
	mask := s.alloc(k.Experts*k.TopK*rows, i64, catTemp, "expert mask")
	y := s.alloc(rows*k.Dim, x.dt, catTemp, "moe out")
	per := (rows*k.TopK + k.Experts - 1) / k.Experts
	for e := range o.experts {
		y = s.expert(k, x, y, wc, idx, &o.experts[e], per)
	}
	s.unref(mask)
	s.unref(wc)
	s.unref(idx)
	if k.Shared > 0 {
		y = s.sharedExpert(o, x, y, rows)
	}
	return y
}

// expert runs one expert on its per routed rows and adds the result into
// y, returning y's new version.
func (s *sim) expert(k *model.MoE, x, y, wc, idx *tensor, p *mlpParams, per int64) *tensor {
	cur := s.alloc(per*k.Dim, x.dt, catTemp, "routed rows")
	if n := s.record("Index", []*tensor{x}, cur); n != nil {
		n.bwdTemp = per * i64
	}
	o := s.gatedMLP(cur, p, per, k.Hidden, k.Dim, k.Activation)
	s.unref(cur)
	rw := s.alloc(per, wc.dt, catTemp, "routing weight")
	s.record("Index", []*tensor{wc}, rw)
	scaled := s.mul(o, rw)
	s.unref(o)
	s.unref(rw)
	sc := s.to(scaled, x.dt)
	s.unref(scaled)
	// index_add_ is in place: each call is a new version of y whose
	// gradient passes to the previous version and is gathered for sc.
	next := s.view(y, y.elems)
	if n := s.record("IndexAdd", []*tensor{y, sc}, next); n != nil {
		n.pass = true
		s.save(n, idx)
	}
	s.unref(y)
	s.unref(sc)
	return next
}

// sharedExpert adds the always-on shared expert (with its sigmoid gate)
// to y.
func (s *sim) sharedExpert(o *moeOp, x, y *tensor, rows int64) *tensor {
	k := o.k
	sh := s.gatedMLP(x, &o.shared, rows, k.Shared, k.Dim, k.Activation)
	if o.sharedGate != nil {
		g := s.matmul(x, o.sharedGate, nil, rows, 1)
		sg := s.unary("Sigmoid", g, false, true)
		s.unref(g)
		m := s.mul(sg, sh)
		s.unref(sg)
		s.unref(sh)
		sh = m
	}
	z := s.add(y, sh)
	s.unref(y)
	s.unref(sh)
	return z
}

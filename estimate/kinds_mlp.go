package estimate

import "github.com/memplan/memplan/model"

// Gated MLPs and mixtures of experts.

func init() {
	register(model.KGatedMLP, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.GatedMLP)
		if k.Fused {
			return &gatedMLPOp{k, s.fusedMLPParams(k.Dim, k.Hidden, k.Bias)}
		}
		return &gatedMLPOp{k, s.mlpParams(k.Dim, k.Hidden, k.Bias, &mlpNames)}
	})
	register(model.KMoE, newMoE)
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

// fusedMLPParams allocates a fused gated MLP's weights (model.GatedMLP.Fused)
// in the order Phi3MLP registers them: gate_up_proj, [2·hidden, dim], in
// gate's place, then down_proj.
func (s *sim) fusedMLPParams(dim, hidden int64, bias bool) mlpParams {
	var p mlpParams
	p.gate, p.gateB = s.matrix(2*hidden, dim, 1, "gate_up_proj.weight"), s.optParam(bias, 2*hidden, "gate_up_proj.bias")
	p.down, p.downB = s.matrix(dim, hidden, 1, "down_proj.weight"), s.optParam(bias, dim, "down_proj.bias")
	return p
}

var (
	mlpNames    = [6]string{"gate.weight", "gate.bias", "up.weight", "up.bias", "down.weight", "down.bias"}
	sharedNames = [6]string{"shared.gate", "", "shared.up", "", "shared.down", ""}
)

type gatedMLPOp struct {
	k *model.GatedMLP
	p mlpParams
}

func (o *gatedMLPOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	if o.k.Fused {
		return s.fusedMLP(x, &o.p, s.rows(sh), o.k.Hidden, o.k.Dim, o.k.Activation)
	}
	y, m := s.gatedMLP(x, &o.p, s.rows(sh), o.k.Hidden, o.k.Dim, o.k.Activation)
	// The product is down_proj's argument, which its call holds until it
	// returns: under tensor parallelism after RowwiseParallel's output
	// hook has run the module's output collective (measured: Maverick's
	// dense layers at tp 2 without sp free it after the all-reduce's
	// output, bench/results/2026-11-28-h200x2-heldout-71, docs/
	// parallelism.md §3.1.8).
	s.atReturn(m)
	return y
}

// fusedMLP is Phi3MLP's forward over rows: up_states = gate_up_proj(x);
// gate, up_states = up_states.chunk(2, dim=-1) (two views of the one
// product, which stays alive through them); up_states = up_states ·
// act(gate), which rebinds the name (act's output and the up view go
// once the product exists, unless saved); down_proj of it. gate stays
// bound until the module returns. In backward the chunk's node gathers
// both halves' gradients into one of the product's size.
func (s *sim) fusedMLP(x *tensor, p *mlpParams, rows, hidden, dim int64, act string) *tensor {
	gu := s.matmul(x, p.gate, p.gateB, rows, 2*hidden)
	gate, up := s.view(gu, rows*hidden), s.view(gu, rows*hidden)
	s.record("Split", []*tensor{gu}, gate, up) // chunk(2)
	s.unref(gu)
	a := s.activation(act, gate, false)
	m := s.mul(up, a)
	s.unref(a)
	s.unref(up)
	y := s.matmul(m, p.down, p.downB, rows, dim)
	s.atReturn(m)
	s.atReturn(gate)
	return y
}

// gatedMLP is down(act(gate(x)) * up(x)) over rows. It returns the output
// and the product act(gate(x)) * up(x), down_proj's input, which the caller
// still holds and drops.
func (s *sim) gatedMLP(x *tensor, p *mlpParams, rows, hidden, dim int64, act string) (y, m *tensor) {
	g := s.matmul(x, p.gate, p.gateB, rows, hidden)
	a := s.activation(act, g, false)
	s.unref(g)
	u := s.matmul(x, p.up, p.upB, rows, hidden)
	m = s.mul(a, u)
	s.unref(a)
	s.unref(u)
	return s.matmul(m, p.down, p.downB, rows, dim), m
}

// sharedExpert is a mixture of experts' shared expert: gatedMLP, its
// product dropped as down_proj returns.
func (s *sim) sharedExpert(x *tensor, p *mlpParams, rows, hidden, dim int64, act string) *tensor {
	y, m := s.gatedMLP(x, p, rows, hidden, dim, act)
	s.unref(m)
	return y
}

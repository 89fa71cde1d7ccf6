package estimate

import "github.com/memplan/memplan/model"

// Gated MLPs and mixtures of experts.

func init() {
	register(model.KGatedMLP, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.GatedMLP)
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

var (
	mlpNames    = [6]string{"gate.weight", "gate.bias", "up.weight", "up.bias", "down.weight", "down.bias"}
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

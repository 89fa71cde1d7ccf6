package estimate

import (
	"strings"

	"github.com/memplan/memplan/model"
)

// LoRA (docs/lora.md): the base parameters are frozen (requires_grad
// False: no node records them, no gradient, no optimizer state) and each
// targeted linear gets two trainable adapter matrices that matmul runs
// after the base product (docs/lora.md §3).

// adapter is the LoRA pair of one wrapped linear.
type adapter struct {
	a, b          *tensor // A [rank, in], B [out, rank]
	rank, dropout float64
	// param marks a ParamWrapper's adapters (lora_params.go): over
	// experts fused into one parameter (experts > 0; their rows are
	// rank·experts) or over a plain matrix (experts 0, the router).
	param   bool
	experts int64
}

// loraRoles maps the simulator's attention and gated-MLP weight names to
// their index in the kind's group of model.LoRALinears.
var loraRoles = map[string]int{"q.weight": 0, "qkv.weight": 0, "k.weight": 1, "v.weight": 2,
	"gate.weight": 0, "up.weight": 1, "down.weight": 2}

// applyLoRA freezes every parameter built so far and gives each targeted
// linear its adapters, allocated after the whole base in module order, as
// get_peft_model does after the model is loaded: in fp32 (peft's
// autocast_adapter_dtype) or in the base's dtype (adapter_dtype: base).
// Only the adapters stay in s.params.
func (s *sim) applyLoRA(spec *model.Spec) {
	l := spec.Training.LoRA
	if !l.Enabled() {
		return
	}
	attn, mlp, other := splitLinears(spec)
	dt := int64(f32)
	if l.AdapterDtype == model.AdapterBase {
		dt = s.cfg.master // the base's storage dtype (under fsdp-bf16 its fp32 shards)
	}
	base := s.params
	s.params = nil
	for _, p := range base {
		p.req = false
	}
	fused := false
	for _, p := range base {
		x, ok := loraLinear(p, attn, mlp, other)
		if !ok || !l.Wraps(x) {
			continue
		}
		fused = fused || x.From != nil
		ad := &adapter{rank: float64(l.Rank), dropout: l.Dropout, param: x.From != nil, experts: x.Experts}
		rows := x.Rank(l.Rank) * max(x.Experts, 1)
		ad.a = s.adapterParam(rows, x.In, dt, "lora_A.weight")
		ad.b = s.adapterParam(x.Out, rows, dt, "lora_B.weight")
		p.lora = ad
	}
	s.frozen = base
	how := "adapters in fp32 (peft's default autocast_adapter_dtype=True)"
	if dt != f32 {
		how = "adapters in the base's dtype (adapter_dtype: base)"
	}
	measured := "LoRA with peft measured on an H100 and under DDP, ZeRO-1 and FSDP2 on 2 × H100 (docs/lora.md §13)"
	if spec.Training.CP > 1 {
		measured += "; with context parallelism modelled, unmeasured"
	}
	s.note("LoRA: " + how + "; enable_input_require_grads with checkpointing only; " + measured)
	if fused {
		s.note("LoRA: peft adapts this mixture of experts' fused parameters (its MLP targets become target_parameters: gate_up_proj at twice the rank, down_proj, and the router under all-linear; the dense and shared MLPs stay frozen), and each forward keeps a parametrized copy of every adapted expert stack until backward (docs/lora.md §14)")
	}
}

// loraLinear finds which of the model's LoRA-targetable linears a base
// parameter is, if any.
func loraLinear(p *tensor, attn, mlp, other []model.LoRALinear) (model.LoRALinear, bool) {
	in, out := p.last, p.second
	switch p.name {
	case "q.weight", "k.weight", "v.weight", "qkv.weight":
		if i := loraRoles[p.name]; i < len(attn) {
			return attn[i], true
		}
	case "o.weight":
		if len(attn) > 0 {
			return attn[len(attn)-1], true
		}
	case "q_proj.weight", "q_a_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight", "kv_b_proj.weight":
		// The latent attention's projections (model.Model.mlaLinears).
		return findLinear(attn, strings.TrimSuffix(p.name, ".weight"), in, out)
	case "gate.weight", "up.weight", "down.weight":
		// Widths checked: DeepSeek's router is a gate.weight too, and
		// no Linear (but a target parameter of fused experts').
		if i := loraRoles[p.name]; i < len(mlp) && mlp[i].From == nil && mlp[i].In == in && mlp[i].Out == out {
			return mlp[i], true
		}
		if p.name == "gate.weight" {
			return findLinear(other, "gate", in, out)
		}
	case "router.weight":
		return findLinear(other, "gate", in, out)
	case "gate_up_proj.weight", "down_proj.weight":
		// A fused gated MLP's (model.GatedMLP.Fused: Phi-3's).
		return findLinear(mlp, strings.TrimSuffix(p.name, ".weight"), in, out)
	case "experts.gate_up_proj", "experts.down_proj":
		// Fused experts' parameters (model.Model.LoRAFusedExperts).
		return findLinear(mlp, strings.TrimPrefix(p.name, "experts."), in, out)
	case "shared.gate", "shared.up", "shared.down":
		// A mixture of experts' shared expert (its dense first layers'
		// MLPs are gate.weight and the rest, first in the list). Never
		// the fused experts' entries, whose widths a shared expert of
		// one expert's width has too (GLM-4.5-Air's down_proj): where
		// peft converts the experts, the shared MLP stays frozen.
		return findLinear(unfused(mlp), strings.TrimPrefix(p.name, "shared.")+"_proj", in, out)
	case "shared_expert_gate":
		return findLinear(other, p.name, in, out)
	case "linear.weight":
		for _, x := range append(append([]model.LoRALinear(nil), mlp...), other...) {
			if x.In == in && x.Out == out {
				return x, true
			}
		}
	}
	return model.LoRALinear{}, false
}

// unfused is list without the fused experts' parameters
// (model.LoRALinear.From).
func unfused(list []model.LoRALinear) []model.LoRALinear {
	out := make([]model.LoRALinear, 0, len(list))
	for _, x := range list {
		if x.From == nil {
			out = append(out, x)
		}
	}
	return out
}

// findLinear is the linear of list named name with in inputs and out
// outputs.
func findLinear(list []model.LoRALinear, name string, in, out int64) (model.LoRALinear, bool) {
	for _, x := range list {
		if x.Name == name && x.In == in && x.Out == out {
			return x, true
		}
	}
	return model.LoRALinear{}, false
}

// adapterParam allocates one trainable adapter matrix [second, last]
// stored in dtype dt. Under ZeRO 2 and 3 (FSDP2, fsdp.go) the GPU keeps
// this rank's shard in dt and the whole matrix exists only while its unit
// is unsharded, in the mixed-precision policy's param dtype if there is
// one (fsdp-bf16), else in dt.
func (s *sim) adapterParam(second, last, dt int64, name string) *tensor {
	var t *tensor
	if s.cfg.zero >= 2 {
		whole := dt
		if s.cfg.master != s.cfg.param {
			whole = s.cfg.param
		}
		t = &tensor{elems: second * last, dt: whole, refs: 1, fixed: catParam, cat: catParam, name: name,
			second: second, last: last, sdt: int8(dt)}
		s.placeShard(t)
	} else {
		t = s.alloc(second*last, dt, catParam, name)
	}
	t.param, t.req = true, true
	t.second, t.last = second, last
	s.params = append(s.params, t)
	return t
}

// loraForward is peft's Linear.forward after the base product y, whose
// hold it takes over: x = x.to(adapter dtype), result = result +
// lora_B(lora_A(dropout(x))) · scaling (which promotes to fp32 over a half
// base), result.to(y's dtype). The tensors live as the Python names hold
// them: the cast input x is a local until the function returns, the base
// output goes when result is rebound to the sum, each temporary of the
// expression as soon as the next op has consumed it (docs/lora.md §3).
func (s *sim) loraForward(x, y *tensor, ad *adapter, rows int64) *tensor {
	xa := s.to(x, ad.a.dt)
	z := s.adapterProduct(xa, ad, rows)
	sum := s.add(y, z)
	s.unref(z)
	dt := y.dt
	s.unref(y)
	out := s.to(sum, dt)
	s.unref(sum)
	s.unref(xa)
	return out
}

// adapterProduct is lora_B(lora_A(dropout(xa))) · scaling, each
// intermediate freed once the next op has consumed it.
func (s *sim) adapterProduct(xa *tensor, ad *adapter, rows int64) *tensor {
	in := s.ref(xa)
	if ad.dropout > 0 {
		s.unref(in)
		in = s.dropout(xa)
	}
	h := s.matmul(in, ad.a, nil, rows, ad.a.second)
	s.unref(in)
	z := s.matmul(h, ad.b, nil, rows, ad.b.second)
	s.unref(h)
	return s.rescale(z)
}

// requireGrad is output.requires_grad_(True) on a tensor without history
// (enable_input_require_grads' hook): a leaf whose gradient, once backward
// reaches it, is dropped with the graph.
func (s *sim) requireGrad(y *tensor) {
	y.req = true
	n := s.slab.node()
	*n = node{name: "InputRequiresGrad", outs: append(s.slab.ptrs(1), y)}
	s.tape = append(s.tape, n)
}

package estimate

// peft's ParamWrapper (peft 0.21, tuners/lora/layer.py): LoRA on a
// parameter rather than a Linear module, which is what peft makes of the
// MLP targets of a mixture of experts whose names transformers 5 fused
// (model.Model.LoRAFusedExperts; docs/lora.md §14). While the wrapped
// module runs, _activate_lora registers a parametrization of the parameter
// (nn.utils.parametrize, cached), so the module sees W plus the adapters'
// product, a tensor of W's size that requires grad.

// paramLoRA is one ParamWrapper while its module runs: the parameter,
// the adapters' factors as the parametrization holds them, and the
// parametrized weight once the module has read it.
type paramLoRA struct {
	p        *tensor
	lhs, rhs *tensor // the factors (3D), or the cast delta and nil (2D)
	merged   *tensor
}

// activateParamLoRA is _activate_lora's entry for p (p.lora set, fused):
// for fused experts (p holds several, a single adapter) get_delta_factors
// casts lora_B, viewed as [experts, out, rank], and lora_A, as [experts,
// rank, in], to p's dtype (copies unless p is fp32, then the adapters
// themselves), and _LoraFactorsProxy keeps them; for a plain matrix (the
// router's weight) get_delta_weight makes (B·A)·scaling in the adapters'
// fp32 (the product dropped once scaled) cast to p's dtype, which
// _LoraParameterProxy keeps. register_parametrization then runs the
// parametrization once to check it, a result of p's size dropped at once
// (with baddbmm's contiguous copy of the permuted lhs beside it).
func (s *sim) activateParamLoRA(p *tensor) *paramLoRA {
	ad := p.lora
	pl := &paramLoRA{p: p}
	if ad.experts > 0 {
		pl.lhs, pl.rhs = s.to(ad.b, p.dt), s.to(ad.a, p.dt)
		s.mergeOnce(pl, false)
		return pl
	}
	prod := s.alloc(p.elems, ad.b.dt, catTemp, "lora_B @ lora_A")
	if n := s.record("MM", []*tensor{ad.b, ad.a}, prod); n != nil {
		s.save(n, ad.a, ad.b)
	}
	sc := s.rescale(prod)
	pl.lhs = s.to(sc, p.dt)
	s.unref(sc)
	s.mergeOnce(pl, false)
	return pl
}

// mergeOnce runs the parametrization over p: baddbmm(W, lhs, rhs) with
// autocast off (its node saves both factors; its backward copies lhs, as
// the forward did) or W + delta (its node passes the gradient on). keep
// makes it the cached weight the module reads; else it is
// register_parametrization's check, dropped.
func (s *sim) mergeOnce(pl *paramLoRA, keep bool) *tensor {
	p := pl.p
	m := s.alloc(p.elems, p.dt, catTemp, p.name+" (parametrized)")
	if pl.rhs != nil {
		t := s.alloc(pl.lhs.elems, pl.lhs.dt, catTemp, "baddbmm lhs copy")
		s.unref(t)
	}
	if !keep {
		s.unref(m)
		return nil
	}
	if pl.rhs != nil {
		if n := s.record("Baddbmm", []*tensor{pl.lhs, pl.rhs}, m); n != nil {
			s.save(n, pl.lhs, pl.rhs)
			n.bwdTemp = pl.lhs.bytes()
		}
	} else if n := s.record("Add", []*tensor{pl.lhs}, m); n != nil {
		n.pass = true
	}
	return m
}

// weight is the parameter p as the running module reads it: its
// parametrized weight when a ParamWrapper is active on it (made on the
// first read, cached until the wrapper exits), else p itself.
func (s *sim) weight(pls []*paramLoRA, p *tensor) *tensor {
	for _, pl := range pls {
		if pl != nil && pl.p == p {
			if pl.merged == nil {
				pl.merged = s.mergeOnce(pl, true)
			}
			return pl.merged
		}
	}
	return p
}

// deactivate is _activate_lora's exit: the cached weight and the
// factors go (kept only where a node saved them).
func (s *sim) deactivate(pl *paramLoRA) {
	if pl == nil {
		return
	}
	s.unref(pl.merged)
	s.unref(pl.lhs)
	s.unref(pl.rhs)
}

// fusedLoRA says whether p carries a ParamWrapper's adapters.
func fusedLoRA(p *tensor) bool { return p != nil && p.lora != nil && p.lora.param }

package model

import "slices"

// LoRALinear is one kind of linear LoRA can wrap: its transformers module
// name, its group (attn, mlp, or "" for other linears such as BERT's head
// transform, which only all targets), its widths and how many the model
// has. A fused parameter peft adapts through a ParamWrapper
// (Model.LoRAFusedExperts) has Experts > 0 (adapters of Experts·rank·RankMul
// rows) and From, the names that target it.
type LoRALinear struct {
	Name, Group    string
	In, Out, Count int64
	// Experts is the fused parameter's experts (0: a Linear module).
	Experts int64
	// RankMul multiplies the rank (peft's rank_pattern for gate_up_proj,
	// two projections fused: 2); 0 means 1.
	RankMul int64
	// From are the transformers 4 module names peft converts to this
	// parameter; naming all of them targets it.
	From []string
}

// Rank is the adapter rank of x for a LoRA of rank r.
func (x LoRALinear) Rank(r int64) int64 { return r * max(x.RankMul, 1) }

// Params is the adapter parameters of one x at rank r: rank·(in+out),
// times the experts of a fused parameter.
func (x LoRALinear) Params(r int64) int64 {
	return x.Rank(r) * (x.In + x.Out) * max(x.Experts, 1)
}

// LoRALinears lists the linears of a transformer shorthand in module order
// within a block (docs/lora.md §9); the output head is never among them,
// as peft's all-linear leaves it out.
func (m *Model) LoRALinears() []LoRALinear {
	d, f, n := m.Hidden, m.Intermediate, m.NumLayers
	lin := func(name, group string, in, out int64) LoRALinear {
		return LoRALinear{Name: name, Group: group, In: in, Out: out, Count: n}
	}
	switch m.Type {
	case GPT2:
		return []LoRALinear{lin("c_attn", TargetsAttn, d, 3*d), lin("c_proj", TargetsAttn, d, d),
			lin("c_fc", TargetsMLP, d, f), lin("c_proj", TargetsMLP, f, d)}
	case Llama:
		hd := m.HeadDim
		if hd == 0 {
			hd = d / m.Heads
		}
		kv := m.KVHeads
		if kv == 0 {
			kv = m.Heads
		}
		attn := []LoRALinear{lin("q_proj", TargetsAttn, d, m.Heads*hd), lin("k_proj", TargetsAttn, d, kv*hd),
			lin("v_proj", TargetsAttn, d, kv*hd)}
		switch {
		case m.KVLoRARank > 0:
			attn = m.mlaLinears(lin)
		case m.FusedQKV:
			attn = []LoRALinear{lin("qkv_proj", TargetsAttn, d, (m.Heads+2*kv)*hd)}
		}
		if m.KVLoRARank > 0 {
			attn = append(attn, lin("o_proj", TargetsAttn, m.Heads*m.VHeadDim, d))
		} else {
			attn = append(attn, lin("o_proj", TargetsAttn, m.Heads*hd, d))
		}
		switch {
		case m.Experts > 0 && m.LoRAFusedExperts:
			return append(attn, m.fusedExpertLinears()...)
		case m.Experts > 0:
			return append(attn, m.moeLinears()...)
		}
		switch {
		case m.PlainMLP:
			// StarCoder2's Starcoder2MLP.
			return append(attn, lin("c_fc", TargetsMLP, d, f), lin("c_proj", TargetsMLP, f, d))
		case m.FusedGateUp:
			// Phi-3's Phi3MLP.
			return append(attn, lin("gate_up_proj", TargetsMLP, d, 2*f), lin("down_proj", TargetsMLP, f, d))
		}
		return append(attn, lin("gate_proj", TargetsMLP, d, f), lin("up_proj", TargetsMLP, d, f), lin("down_proj", TargetsMLP, f, d))
	case BERT:
		return []LoRALinear{lin("query", TargetsAttn, d, d), lin("key", TargetsAttn, d, d), lin("value", TargetsAttn, d, d),
			lin("dense", TargetsAttn, d, d), lin("dense", TargetsMLP, d, f), lin("dense", TargetsMLP, f, d),
			{Name: "dense", In: d, Out: d, Count: 1}} // cls.predictions.transform.dense
	case NeoX:
		if m.SplitQKV {
			// Phi's PhiAttention and PhiMLP.
			kv := m.KVHeads * (d / m.Heads)
			return []LoRALinear{lin("q_proj", TargetsAttn, d, d), lin("k_proj", TargetsAttn, d, kv), lin("v_proj", TargetsAttn, d, kv),
				lin("dense", TargetsAttn, d, d), lin("fc1", TargetsMLP, d, f), lin("fc2", TargetsMLP, f, d)}
		}
		return []LoRALinear{lin("query_key_value", TargetsAttn, d, 3*d), lin("dense", TargetsAttn, d, d),
			lin("dense_h_to_4h", TargetsMLP, d, f), lin("dense_4h_to_h", TargetsMLP, f, d)}
	}
	return nil
}

// mlaLinears are the query and key/value projections of DeepSeek's latent
// attention (DeepseekV2Attention, DeepseekV3Attention) in module order:
// q_proj, or q_a_proj and q_b_proj around the query rank's norm; then
// kv_a_proj_with_mqa and kv_b_proj.
func (m *Model) mlaLinears(lin func(name, group string, in, out int64) LoRALinear) []LoRALinear {
	d, qk := m.Hidden, m.Heads*(m.QKNopeDim+m.QKRopeDim)
	q := []LoRALinear{lin("q_proj", TargetsAttn, d, qk)}
	if m.QLoRARank > 0 {
		q = []LoRALinear{lin("q_a_proj", TargetsAttn, d, m.QLoRARank), lin("q_b_proj", TargetsAttn, m.QLoRARank, qk)}
	}
	return append(q, lin("kv_a_proj_with_mqa", TargetsAttn, d, m.KVLoRARank+m.QKRopeDim),
		lin("kv_b_proj", TargetsAttn, m.KVLoRARank, m.Heads*(m.QKNopeDim+m.VHeadDim)))
}

// moeLinears are a mixture of experts' linears: the dense first layers'
// MLPs (DeepSeek's first_k_dense_replace), the shared expert's three
// projections in every sparse layer, and Qwen2-MoE's shared_expert_gate
// (a Linear to one output, which only all-linear wraps). The experts
// themselves are fused parameters (gate_up_proj, down_proj), and so are
// the routers (Qwen2MoeTopKRouter, GptOssTopKRouter, DeepSeek's
// TopkRouter), which peft's target_modules and all-linear never wrap.
func (m *Model) moeLinears() []LoRALinear {
	d, dense := m.Hidden, m.denseCount()
	sparse := m.NumLayers - dense
	var out []LoRALinear
	for _, mlp := range []struct{ width, count int64 }{{m.DenseIntermediate, dense}, {m.SharedExpert, sparse}} {
		if mlp.count > 0 && mlp.width > 0 {
			f, n := mlp.width, mlp.count
			out = append(out, LoRALinear{Name: "gate_proj", Group: TargetsMLP, In: d, Out: f, Count: n},
				LoRALinear{Name: "up_proj", Group: TargetsMLP, In: d, Out: f, Count: n},
				LoRALinear{Name: "down_proj", Group: TargetsMLP, In: f, Out: d, Count: n})
		}
	}
	if m.SharedGate {
		out = append(out, LoRALinear{Name: "shared_expert_gate", In: d, Out: 1, Count: sparse})
	}
	return out
}

// fusedExpertLinears are what peft adapts in a mixture of experts it
// converts (Model.LoRAFusedExperts): the router's weight (a target
// parameter only all-linear takes) and the experts' gate_up_proj (from
// gate_proj and up_proj, at twice the rank) and down_proj, each with one
// adapter pair of rank·experts rows (peft's ParamWrapper). The dense and
// shared MLPs are left out: their names are converted to the experts'.
func (m *Model) fusedExpertLinears() []LoRALinear {
	d, f, e, n := m.Hidden, m.Intermediate, m.Experts, m.NumLayers-m.denseCount()
	return []LoRALinear{
		{Name: "gate", In: d, Out: e, Count: n, From: []string{"gate"}},
		{Name: "gate_up_proj", Group: TargetsMLP, In: d, Out: 2 * f, Count: n, Experts: e, RankMul: 2, From: []string{"gate_proj", "up_proj"}},
		{Name: "down_proj", Group: TargetsMLP, In: f, Out: d, Count: n, Experts: e, From: []string{"down_proj"}},
	}
}

// Linears lists the nn.Linear modules of a transformer shorthand in module
// order within a block, the output head excepted: what bitsandbytes
// replaces with its quantized layers. They are LoRALinears' but where peft
// adapts fused experts (Model.LoRAFusedExperts): their parameters and the
// router are no Linears, and the dense and shared MLPs are.
func (m *Model) Linears() []LoRALinear {
	all := m.LoRALinears()
	if !m.LoRAFusedExperts || m.Experts == 0 {
		return all
	}
	var out []LoRALinear
	for _, x := range all {
		if x.From == nil {
			out = append(out, x)
		}
	}
	return append(out, m.moeLinears()...)
}

// Wraps reports whether the adapters wrap a linear.
func (l *LoRA) Wraps(x LoRALinear) bool {
	if !l.Enabled() {
		return false
	}
	switch l.Targets {
	case TargetsAll:
		return true
	case TargetsAttn, TargetsMLP:
		return x.Group == l.Targets
	}
	if slices.Contains(l.Names, x.Name) {
		return true
	}
	for _, n := range x.From {
		if !slices.Contains(l.Names, n) {
			return false
		}
	}
	return len(x.From) > 0
}

// Trainable is the number of adapter parameters: rank·(in+out) for every
// targeted linear (peft's get_nb_trainable_parameters, lora_bias off).
func (s *Spec) Trainable() int64 {
	l := s.Training.LoRA
	var n int64
	for _, x := range s.Model.LoRALinears() {
		if l.Wraps(x) {
			n += x.Params(l.Rank) * x.Count
		}
	}
	return n
}

// denseCount is how many of a mixture of experts' layers have a dense MLP
// instead of experts: DeepSeek's first DenseLayers, or all but every
// MoEInterleave-th (Llama 4 Maverick's).
func (m *Model) denseCount() int64 {
	if m.MoEInterleave > 1 {
		return m.NumLayers - m.NumLayers/m.MoEInterleave
	}
	return m.DenseLayers
}

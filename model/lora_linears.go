package model

import "slices"

// LoRALinear is one kind of linear LoRA can wrap: its transformers module
// name, its group (attn, mlp, or "" for other linears such as BERT's head
// transform, which only all targets), its widths and how many the model has.
type LoRALinear struct {
	Name, Group    string
	In, Out, Count int64
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
		if m.FusedQKV {
			attn = []LoRALinear{lin("qkv_proj", TargetsAttn, d, (m.Heads+2*kv)*hd)}
		}
		attn = append(attn, lin("o_proj", TargetsAttn, m.Heads*hd, d))
		if m.Experts > 0 {
			// A mixture of experts has no MLP linears: the experts are
			// fused parameters (gate_up_proj, down_proj), and so are the
			// routers (Qwen2MoeTopKRouter, GptOssTopKRouter), which
			// peft's target_modules and all-linear never wrap.
			return attn
		}
		if m.PlainMLP {
			// StarCoder2's Starcoder2MLP.
			return append(attn, lin("c_fc", TargetsMLP, d, f), lin("c_proj", TargetsMLP, f, d))
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
	return slices.Contains(l.Names, x.Name)
}

// Trainable is the number of adapter parameters: rank·(in+out) for every
// targeted linear (peft's get_nb_trainable_parameters, lora_bias off).
func (s *Spec) Trainable() int64 {
	l := s.Training.LoRA
	var n int64
	for _, x := range s.Model.LoRALinears() {
		if l.Wraps(x) {
			n += l.Rank * (x.In + x.Out) * x.Count
		}
	}
	return n
}

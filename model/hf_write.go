package model

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"
)

// Writing an imported model as a spec (memplan import).

// SpecYAML writes a model as a spec with the given training section.
func (m *Model) SpecYAML(name, from string, training map[string]any) ([]byte, error) {
	f := map[string]any{"type": m.Type, "layers": m.NumLayers, "hidden": m.Hidden, "heads": m.Heads, "vocab": m.Vocab}
	setFlags(f, flag{"no_cache", m.NoCache})
	switch m.Type {
	case GPT2:
		f["positions"], f["intermediate"], f["dropout"], f["attention_dropout"] = m.Positions, m.Intermediate, m.Dropout, m.AttnDropout
		f["tied"], f["activation"] = m.Tied, m.Activation
	case NeoX:
		f["intermediate"], f["kv_heads"], f["tied"], f["bias"], f["activation"] = m.Intermediate, m.KVHeads, m.Tied, m.AttentionBias, m.Activation
		setFlags(f, flag{"shared_norm", m.SharedNorm}, flag{"split_qkv", m.SplitQKV}, flag{"head_bias", m.HeadBias})
		if m.Rotary > 0 && m.Rotary < 1 {
			f["rotary"] = m.Rotary
		}
		setValues(f, value{"dropout", m.Dropout}, value{"embedding_dropout", m.EmbeddingDropout}, value{"attention_dropout", m.AttnDropout})
	case BERT:
		f["positions"], f["type_vocab"], f["intermediate"] = m.Positions, m.TypeVocab, m.Intermediate
		f["dropout"], f["attention_dropout"], f["tied"], f["activation"] = m.Dropout, m.AttnDropout, m.Tied, m.Activation
		if m.Roberta {
			f["roberta"] = true
		}
	case Llama:
		f["intermediate"], f["kv_heads"], f["head_dim"], f["tied"] = m.Intermediate, m.KVHeads, m.HeadDim, m.Tied
		f["attention_bias"], f["mlp_bias"], f["activation"], f["attention_dropout"] = m.AttentionBias, m.MLPBias, m.Activation, m.AttnDropout
		m.llamaOptions(f)
		if m.SlidingWindow > 0 {
			f["sliding_window"] = m.SlidingWindow
			if m.SlidingPattern > 1 {
				f["sliding_pattern"] = m.SlidingPattern
			}
		}
		if m.NoRoPEPattern > 1 {
			f["no_rope_pattern"] = m.NoRoPEPattern
		}
		if m.Rotary > 0 && m.Rotary < 1 {
			f["rotary"] = m.Rotary
		}
		if m.Experts > 0 {
			f["experts"], f["top_k"] = m.Experts, m.TopK
			if m.SharedExpert > 0 {
				f["shared_expert"], f["shared_expert_gate"] = m.SharedExpert, m.SharedGate
			}
			if m.Router != "" {
				f["router"] = m.Router
			}
			if m.ExpertGate != "" {
				f["expert_gate"] = m.ExpertGate
			}
		}
	}
	doc := map[string]any{"name": name, "model": f, "training": training}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Imported from a transformers config (model_type %s) by memplan import.\n", from)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// llamaOptions writes the llama fields a spec leaves out when unset: the
// switches that are on and the constants that are set.
func (m *Model) llamaOptions(f map[string]any) {
	setFlags(f, flag{"qk_norm", m.QKNorm}, flag{"fused_qkv", m.FusedQKV}, flag{"fused_gate_up", m.FusedGateUp}, flag{"sandwich_norm", m.SandwichNorm},
		flag{"plain_norm", m.PlainNorm}, flag{"post_norm", m.PostNorm}, flag{"qk_norm_whole", m.QKNormWhole}, flag{"qk_norm_late", m.QKNormLate},
		flag{"norm_product_fp32", m.NormProductFP32}, flag{"rope_fp32", m.RoPEFP32}, flag{"rope_cast", m.RoPECast}, flag{"rope_concat", m.RoPEConcat},
		flag{"project_first", m.ProjectFirst}, flag{"layer_norm", m.AffineNorm}, flag{"plain_mlp", m.PlainMLP},
		flag{"out_bias", m.OutBias}, flag{"parallel_block", m.ParallelBlock}, flag{"centered_norm", m.CenteredNorm},
		flag{"rope_upcast", m.RoPEUpcast}, flag{"gemma", m.Gemma}, flag{"local_rope", m.LocalRoPE},
		flag{"attention_sinks", m.AttnSinks}, flag{"rope_halves", m.RoPEHalves}, flag{"rope_interleave", m.RoPEInterleave},
		flag{"rope_complex", m.RoPEComplex}, flag{"shared_expert_after", m.SharedAfter}, flag{"lora_fused_experts", m.LoRAFusedExperts},
		flag{"router_no_renorm", m.RouterNoRenorm}, flag{"qk_l2_norm", m.QKL2Norm}, flag{"attn_temperature", m.AttnTemperature},
		flag{"dense_experts", m.DenseExperts})
	for _, v := range []struct {
		key string
		n   int64
	}{{"kv_lora_rank", m.KVLoRARank}, {"q_lora_rank", m.QLoRARank}, {"qk_nope_head_dim", m.QKNopeDim}, {"qk_rope_head_dim", m.QKRopeDim},
		{"v_head_dim", m.VHeadDim}, {"dense_layers", m.DenseLayers}, {"dense_intermediate", m.DenseIntermediate}, {"moe_interleave", m.MoEInterleave},
		{"router_groups", m.RouterGroups}, {"router_top_groups", m.RouterTopGroups}} {
		if v.n > 0 {
			f[v.key] = v.n
		}
	}
	setValues(f, value{"embedding_multiplier", m.EmbeddingMultiplier}, value{"residual_multiplier", m.ResidualMultiplier},
		value{"logits_scaling", m.LogitsScaling}, value{"logit_softcap", m.LogitSoftcap}, value{"attn_softcap", m.AttnSoftcap},
		value{"dropout", m.Dropout}, value{"embedding_dropout", m.EmbeddingDropout}, value{"logit_scale", m.LogitScale})
}

// flag and value are a spec key with a switch or a constant (setFlags,
// setValues).
type (
	flag struct {
		key string
		on  bool
	}
	value struct {
		key string
		v   float64
	}
)

// setFlags writes the switches that are on.
func setFlags(f map[string]any, flags ...flag) {
	for _, o := range flags {
		if o.on {
			f[o.key] = true
		}
	}
}

// setValues writes the constants that are set (above 0).
func setValues(f map[string]any, values ...value) {
	for _, o := range values {
		if o.v > 0 {
			f[o.key] = o.v
		}
	}
}

package model

import (
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

func decodeModel(e *errs, n *yaml.Node, m *Model) {
	mm := newMapping(e, n, "model")
	m.lines = mm.keys
	line, ok := mm.str("type", &m.Type)
	if !ok {
		if mm.vals["type"] == nil && n.Kind == yaml.MappingNode {
			e.add(n.Line, "model: missing required field \"type\" (one of %s)", oneOf(ModelTypes))
		}
		return
	}
	m.Type = strings.ToLower(m.Type)
	switch m.Type {
	case GPT2, Llama, BERT:
		decodeTransformer(e, mm, m)
	case NeoX:
		decodeNeoX(e, mm, m)
	case ResNet:
		decodeResNet(e, mm, n, m)
	case ViT:
		decodeViT(mm, m)
	case Sequential:
		decodeInput(e, mm, &m.Input)
		if v := mm.get("layers"); v != nil {
			m.Layers = decodeLayers(e, v, "layers")
		} else {
			e.add(n.Line, "model: missing required field \"layers\"")
		}
	default:
		e.add(line, "type: unknown model type %q (valid: %s)", m.Type, oneOf(ModelTypes))
		return
	}
	mm.finish()
}

// decodeTransformer reads gpt2, llama and bert models.
func decodeTransformer(e *errs, mm *mapping, m *Model) {
	mm.int("layers", &m.NumLayers, true)
	mm.int("hidden", &m.Hidden, true)
	mm.int("heads", &m.Heads, true)
	mm.int("vocab", &m.Vocab, true)
	m.Intermediate = 4 * m.Hidden
	m.Tied = m.Type != Llama
	switch m.Type {
	case GPT2:
		m.Positions, m.Dropout, m.AttnDropout, m.Activation = 1024, 0.1, 0.1, KGELUNew
	case BERT:
		m.Positions, m.TypeVocab, m.Dropout, m.AttnDropout, m.Activation = 512, 2, 0.1, 0.1, KGELU
	case Llama:
		m.Activation, m.KVHeads = KSiLU, m.Heads
		if m.Heads > 0 {
			m.HeadDim = m.Hidden / m.Heads
		}
	}
	mm.int("intermediate", &m.Intermediate, m.Type == Llama)
	mm.bool("tied", &m.Tied)
	if m.Type != BERT {
		mm.bool("no_cache", &m.NoCache)
	}
	if m.Type != Llama {
		mm.int("positions", &m.Positions, false)
		mm.float("dropout", &m.Dropout, 0, 1)
	}
	mm.float("attention_dropout", &m.AttnDropout, 0, 1)
	if m.Type == BERT {
		mm.int("type_vocab", &m.TypeVocab, false)
		mm.bool("roberta", &m.Roberta)
	}
	if m.Type == Llama {
		decodeLlama(e, mm, m)
	}
	decodeActivation(e, mm, m)
}

// decodeLlama reads a llama model's own fields: its block's families
// (docs/spec.md's llama row), experts and latent attention.
func decodeLlama(e *errs, mm *mapping, m *Model) {
	mm.int("kv_heads", &m.KVHeads, false)
	mm.int("head_dim", &m.HeadDim, false)
	mm.bool("attention_bias", &m.AttentionBias)
	mm.bool("mlp_bias", &m.MLPBias)
	mm.bool("qk_norm", &m.QKNorm)
	mm.bool("sandwich_norm", &m.SandwichNorm)
	mm.bool("post_norm", &m.PostNorm)
	mm.bool("plain_norm", &m.PlainNorm)
	mm.bool("qk_norm_whole", &m.QKNormWhole)
	mm.bool("qk_norm_late", &m.QKNormLate)
	mm.bool("norm_product_fp32", &m.NormProductFP32)
	mm.bool("rope_fp32", &m.RoPEFP32)
	mm.bool("rope_cast", &m.RoPECast)
	mm.bool("rope_concat", &m.RoPEConcat)
	mm.bool("project_first", &m.ProjectFirst)
	mm.int("no_rope_pattern", &m.NoRoPEPattern, false)
	mm.bool("layer_norm", &m.AffineNorm)
	mm.bool("plain_mlp", &m.PlainMLP)
	mm.bool("out_bias", &m.OutBias)
	mm.float("dropout", &m.Dropout, 0, 1)
	mm.float("embedding_dropout", &m.EmbeddingDropout, 0, 1)
	mm.bool("parallel_block", &m.ParallelBlock)
	mm.bool("centered_norm", &m.CenteredNorm)
	mm.bool("rope_upcast", &m.RoPEUpcast)
	mm.float("logit_scale", &m.LogitScale, 0, 1e6)
	mm.float("embedding_multiplier", &m.EmbeddingMultiplier, 0, 1e6)
	mm.float("residual_multiplier", &m.ResidualMultiplier, 0, 1e6)
	mm.float("logits_scaling", &m.LogitsScaling, 0, 1e6)
	mm.bool("gemma", &m.Gemma)
	mm.float("logit_softcap", &m.LogitSoftcap, 0, 1e6)
	mm.float("attn_softcap", &m.AttnSoftcap, 0, 1e6)
	mm.int("sliding_window", &m.SlidingWindow, false)
	mm.int("sliding_pattern", &m.SlidingPattern, false)
	mm.bool("local_rope", &m.LocalRoPE)
	mm.int("experts", &m.Experts, false)
	mm.int("top_k", &m.TopK, m.Experts > 0)
	mm.int("shared_expert", &m.SharedExpert, false)
	mm.bool("shared_expert_gate", &m.SharedGate)
	mm.bool("fused_qkv", &m.FusedQKV)
	mm.bool("fused_gate_up", &m.FusedGateUp)
	mm.bool("attention_sinks", &m.AttnSinks)
	mm.bool("rope_halves", &m.RoPEHalves)
	mm.float("rotary", &m.Rotary, 0, 1)
	mm.bool("qk_l2_norm", &m.QKL2Norm)
	mm.bool("attn_temperature", &m.AttnTemperature)
	mm.bool("dense_experts", &m.DenseExperts)
	mm.int("moe_interleave", &m.MoEInterleave, false)
	decodeExpertChoices(e, mm, m)
	decodeMLA(e, mm, m)
	llamaConflicts(e, mm, m)
}

// decodeNeoX reads a neox model.
func decodeNeoX(e *errs, mm *mapping, m *Model) {
	mm.int("layers", &m.NumLayers, true)
	mm.int("hidden", &m.Hidden, true)
	mm.int("heads", &m.Heads, true)
	mm.int("vocab", &m.Vocab, true)
	m.Intermediate, m.KVHeads, m.Activation, m.AttentionBias = 4*m.Hidden, m.Heads, KGELU, true
	mm.int("intermediate", &m.Intermediate, false)
	mm.int("kv_heads", &m.KVHeads, false)
	mm.bool("tied", &m.Tied)
	mm.bool("no_cache", &m.NoCache)
	mm.bool("bias", &m.AttentionBias)
	m.MLPBias = m.AttentionBias
	mm.bool("shared_norm", &m.SharedNorm)
	mm.float("rotary", &m.Rotary, 0, 1)
	mm.bool("split_qkv", &m.SplitQKV)
	mm.bool("head_bias", &m.HeadBias)
	mm.float("dropout", &m.Dropout, 0, 1)
	mm.float("embedding_dropout", &m.EmbeddingDropout, 0, 1)
	mm.float("attention_dropout", &m.AttnDropout, 0, 1)
	decodeActivation(e, mm, m)
}

// decodeResNet reads a resnet model.
func decodeResNet(e *errs, mm *mapping, n *yaml.Node, m *Model) {
	m.Width, m.Classes, m.Channels = 64, 1000, 3
	mm.int("depth", &m.Depth, false)
	if mm.has("blocks") {
		decodeIntList(e, mm.get("blocks"), &m.Blocks)
		if _, ok := mm.str("block", &m.Block); !ok {
			e.add(mm.line, "model: \"blocks\" needs \"block\" (basic or bottleneck)")
		} else if m.Block != "basic" && m.Block != "bottleneck" {
			e.add(mm.keys["block"], "block: unknown block %q (valid: basic, bottleneck)", m.Block)
		}
	} else if m.Depth > 0 {
		st, ok := resnetStages[m.Depth]
		if !ok {
			e.add(mm.keys["depth"], "depth: %d is not a torchvision ResNet (valid: 18, 34, 50, 101, 152; or give blocks and block)", m.Depth)
		}
		m.Blocks, m.Block = st.blocks, st.block
	} else if n.Kind == yaml.MappingNode {
		e.add(n.Line, "model: resnet needs \"depth\" (18, 34, 50, 101, 152) or \"blocks\" and \"block\"")
	}
	var total int64
	for _, b := range m.Blocks {
		total += min(b, MaxLayers)
	}
	if total > MaxLayers/16 {
		e.add(mm.keys["blocks"], "blocks: more residual blocks than memplan simulates (%d)", MaxLayers/16)
		m.Blocks = nil
	}
	mm.int("width", &m.Width, false)
	if m.Width > 1<<20 {
		e.add(mm.keys["width"], "width: %d is larger than memplan supports (%d)", m.Width, 1<<20)
		m.Width = 64
	}
	mm.int("classes", &m.Classes, false)
	mm.int("channels", &m.Channels, false)
}

// decodeViT reads a vit model.
func decodeViT(mm *mapping, m *Model) {
	m.Patch, m.Classes, m.Channels, m.Activation = 16, 1000, 3, KGELU
	mm.int("layers", &m.NumLayers, true)
	mm.int("hidden", &m.Hidden, true)
	mm.int("heads", &m.Heads, true)
	m.Intermediate = 4 * m.Hidden
	mm.int("intermediate", &m.Intermediate, false)
	mm.int("patch", &m.Patch, false)
	mm.int("classes", &m.Classes, false)
	mm.int("channels", &m.Channels, false)
	mm.float("dropout", &m.Dropout, 0, 1)
	mm.float("attention_dropout", &m.AttnDropout, 0, 1)
}

func decodeActivation(e *errs, mm *mapping, m *Model) {
	line, ok := mm.str("activation", &m.Activation)
	if !ok {
		return
	}
	valid := map[string]string{"gelu": KGELU, "gelu_new": KGELUNew, "gelu_pytorch_tanh": KGELU, "relu": KReLU, "silu": KSiLU, "swish": KSiLU, "tanh": KTanh}
	k, found := valid[strings.ToLower(m.Activation)]
	if !found {
		var names []string
		for n := range valid {
			names = append(names, n)
		}
		e.add(line, "activation: unknown activation %q (valid: %s)", m.Activation, oneOf(names))
		return
	}
	m.Activation = k
}

func decodeIntList(e *errs, n *yaml.Node, dst *[]int64) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		e.add(n.Line, "blocks: want a list of block counts such as [3, 4, 6, 3], got %s", describe(n))
		return
	}
	for _, c := range n.Content {
		v, err := strconv.ParseInt(c.Value, 10, 64)
		if err != nil || v <= 0 || c.Kind != yaml.ScalarNode {
			e.add(c.Line, "blocks: want positive whole numbers, got %s", describe(c))
			return
		}
		*dst = append(*dst, v)
	}
}

func decodeInput(e *errs, mm *mapping, in *Input) {
	v := mm.get("input")
	if v == nil {
		e.add(mm.line, "model: missing required field \"input\" (one of: {features: N}, tokens, {image: {channels: C}}, {signal: {channels: C}})")
		return
	}
	if v.Kind == yaml.ScalarNode && v.Value == InputTokens {
		in.Kind = InputTokens
		return
	}
	im := newMapping(e, v, "input")
	switch {
	case im.has(InputFeatures):
		in.Kind = InputFeatures
		im.int(InputFeatures, &in.Features, true)
	case im.has(InputImage):
		in.Kind = InputImage
		sub := newMapping(e, im.get(InputImage), "input.image")
		in.Channels = 3
		sub.int("channels", &in.Channels, false)
		sub.finish()
	case im.has(InputSignal):
		in.Kind = InputSignal
		sub := newMapping(e, im.get(InputSignal), "input.signal")
		sub.int("channels", &in.Channels, true)
		sub.finish()
	case im.has(InputTokens):
		in.Kind = InputTokens
		var b bool
		im.bool(InputTokens, &b)
	default:
		if v.Kind == yaml.MappingNode {
			e.add(v.Line, "input: want one of \"features: N\", \"image: {channels: C}\", \"signal: {channels: C}\" or \"tokens\"")
		}
	}
	im.finish()
}

// decodeMLA reads a llama model's multi-head latent attention
// (kv_lora_rank and the widths it needs) and DeepSeek's dense first
// layers, shared expert order and router groups.
func decodeMLA(e *errs, mm *mapping, m *Model) {
	mm.int("kv_lora_rank", &m.KVLoRARank, false)
	mm.int("q_lora_rank", &m.QLoRARank, false)
	mm.int("qk_nope_head_dim", &m.QKNopeDim, m.KVLoRARank > 0)
	mm.int("qk_rope_head_dim", &m.QKRopeDim, m.KVLoRARank > 0)
	mm.int("v_head_dim", &m.VHeadDim, m.KVLoRARank > 0)
	mm.bool("rope_interleave", &m.RoPEInterleave)
	mm.bool("rope_complex", &m.RoPEComplex)
	mm.int("dense_layers", &m.DenseLayers, false)
	mm.int("dense_intermediate", &m.DenseIntermediate, m.DenseLayers > 0 || m.MoEInterleave > 1)
	mm.bool("shared_expert_after", &m.SharedAfter)
	mm.int("router_groups", &m.RouterGroups, GroupedRouter(m.Router))
	mm.int("router_top_groups", &m.RouterTopGroups, GroupedRouter(m.Router))
	if m.KVLoRARank == 0 {
		for _, k := range []string{"q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_interleave"} {
			if mm.has(k) {
				e.add(mm.keys[k], "%s: needs kv_lora_rank (multi-head latent attention)", k)
			}
		}
	} else if m.QKRopeDim%2 != 0 {
		e.add(mm.keys["qk_rope_head_dim"], "qk_rope_head_dim: %d must be even (rotated in pairs)", m.QKRopeDim)
	}
	if m.RoPEInterleave && m.RoPEComplex {
		e.add(mm.keys["rope_complex"], "rope_complex: the rotary dims are rotated either as interleaved pairs (rope_interleave) or as complex numbers, not both")
	}
	if m.MoEInterleave > 0 && (m.MoEInterleave == 1 || m.Experts == 0 || m.DenseLayers > 0 || m.MoEInterleave > m.NumLayers) {
		e.add(mm.keys["moe_interleave"], "moe_interleave: experts on every %d-th layer of %d needs experts, 2 or more, no dense_layers, and at most the layers", m.MoEInterleave, m.NumLayers)
	}
	if m.DenseLayers > 0 && (m.Experts == 0 || m.DenseLayers >= m.NumLayers) {
		e.add(mm.keys["dense_layers"], "dense_layers: the first %d of %d layers dense needs experts in the rest", m.DenseLayers, m.NumLayers)
	}
}

// decodeExpertChoices reads a llama model's router and expert_gate
// (MoE.Router, MoE.Gate) and lora_fused_experts, which need experts.
func decodeExpertChoices(e *errs, mm *mapping, m *Model) {
	mm.bool("lora_fused_experts", &m.LoRAFusedExperts)
	mm.bool("router_no_renorm", &m.RouterNoRenorm)
	for _, k := range []string{"lora_fused_experts", "router_no_renorm"} {
		if mm.has(k) && m.Experts == 0 {
			e.add(mm.keys[k], "%s: needs experts", k)
		}
	}
	if m.RouterNoRenorm && m.Router != RouterSoftmaxTopK && m.Router != RouterSigmoidGroup {
		e.add(mm.keys["router_no_renorm"], "router_no_renorm: only the softmax_topk and sigmoid_group routers renormalise optionally")
	}
	for _, c := range []struct {
		key     string
		dst     *string
		choices []expertChoice
	}{{"router", &m.Router, routerChoices}, {"expert_gate", &m.ExpertGate, gateChoices}} {
		line, ok := mm.str(c.key, c.dst)
		if !ok {
			continue
		}
		if err := parseExpertChoice(c.choices, c.dst); err != nil {
			e.add(line, "%s: %v", c.key, err)
		} else if m.Experts == 0 {
			e.add(line, "%s: needs experts", c.key)
		}
	}
}

// llamaConflicts refuses llama options that contradict each other: more
// than one choice of norm, a parallel block with norms placed around each
// branch, StarCoder2's MLP with experts, and Llama 4's options beside
// others (llama4Conflicts).
func llamaConflicts(e *errs, mm *mapping, m *Model) {
	norms, line := 0, mm.line
	for _, n := range []struct {
		key string
		on  bool
	}{{"plain_norm", m.PlainNorm}, {"layer_norm", m.AffineNorm}, {"centered_norm", m.CenteredNorm}} {
		if n.on {
			norms, line = norms+1, max(line, mm.keys[n.key])
		}
	}
	if norms > 1 {
		e.add(line, "model: plain_norm, layer_norm and centered_norm each choose the norm: give one")
	}
	if m.ParallelBlock && (m.PostNorm || m.SandwichNorm) {
		e.add(mm.keys["parallel_block"], "parallel_block: one norm under both branches, not with post_norm or sandwich_norm")
	}
	if m.PlainMLP && m.Experts > 0 {
		e.add(mm.keys["plain_mlp"], "plain_mlp: a two-layer MLP, not with experts")
	}
	if m.FusedGateUp && (m.PlainMLP || m.Experts > 0) {
		e.add(mm.keys["fused_gate_up"], "fused_gate_up: fuses the gated MLP's gate and up projections, not with plain_mlp or experts")
	}
	if m.QKNormLate && (!m.QKNorm || m.QKNormWhole) {
		e.add(mm.keys["qk_norm_late"], "qk_norm_late: orders per-head query and key norms: it needs qk_norm, not qk_norm_whole")
	}
	llama4Conflicts(e, mm, m)
	if m.Rotary > 0 && m.Rotary < 1 && (m.KVLoRARank > 0 || m.RoPEHalves) {
		e.add(mm.keys["rotary"], "rotary: a fraction of each head rotated, not with latent attention's rotary dims or rope_halves")
	}
}

// llama4Conflicts refuses Llama 4's options where they contradict the
// rest: the complex rotation of whole heads beside another rotation, the
// weightless query and key norm beside a weighted one, the temperature
// without layers that skip rotary embeddings, and the dense experts
// without their router.
func llama4Conflicts(e *errs, mm *mapping, m *Model) {
	if m.RoPEComplex && m.KVLoRARank == 0 && (m.RoPEHalves || m.Rotary > 0 && m.Rotary < 1 || m.RoPEUpcast || m.RoPEConcat || m.RoPEFP32) {
		e.add(mm.keys["rope_complex"], "rope_complex: whole heads rotated as complex numbers, not with rope_halves, rotary, rope_upcast, rope_concat or rope_fp32")
	}
	if m.QKL2Norm && m.QKNorm {
		e.add(mm.keys["qk_l2_norm"], "qk_l2_norm: Llama 4's weightless query and key norm, not with qk_norm")
	}
	if m.AttnTemperature && m.NoRoPEPattern < 2 {
		e.add(mm.keys["attn_temperature"], "attn_temperature: scales the queries of the layers without rotary embeddings: it needs no_rope_pattern")
	}
	if m.DenseExperts != (m.Router == RouterTopKSigmoid) && m.Experts > 0 {
		e.add(max(mm.keys["dense_experts"], mm.keys["router"]), "dense_experts: Llama 4's experts and its topk_sigmoid router come together")
	}
	if m.DenseExperts && m.Experts == 0 {
		e.add(mm.keys["dense_experts"], "dense_experts: needs experts")
	}
}

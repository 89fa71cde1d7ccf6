package model

import "slices"

// The readers of the llama-type families whose changes to Llama's block
// take more than a few fields (hf.go's llama calls them).

// starcoder2 reads StarCoder2's changes to Llama's block
// (modeling_starcoder2.py): nn.LayerNorms with weight and bias, a bias on
// every projection (use_bias), a two-layer MLP (c_fc, the activation,
// c_proj), and dropouts on the embeddings (embedding_dropout), on each
// branch's output inside it (residual_dropout) and on eager attention's
// probabilities (attention_dropout). Its configs' norm_type and mlp_type
// are not read by transformers, nor here.
func (c *hfConfig) starcoder2(m *Model) {
	bias := c.bool("use_bias", true)
	m.AttentionBias, m.OutBias, m.MLPBias = bias, bias, bias
	m.AffineNorm, m.PlainMLP = true, true
	m.Activation = c.str("hidden_act", "gelu_pytorch_tanh")
	m.Dropout, m.EmbeddingDropout = c.float("residual_dropout", 0), c.float("embedding_dropout", 0)
}

// cohere reads Cohere's changes to Llama's block (modeling_cohere.py):
// one CohereLayerNorm under both the attention and the MLP, the query and
// key rotated in fp32 and cast back, attention_bias on the output
// projection too, and the logits times logit_scale. use_qk_norm (Command
// R+'s per-head norms) is refused.
func (c *hfConfig) cohere(m *Model) {
	m.ParallelBlock, m.CenteredNorm, m.RoPEUpcast = true, true, true
	m.OutBias = m.AttentionBias
	m.LogitScale = c.float("logit_scale", 0.0625)
	if c.bool("use_qk_norm", false) {
		c.fail("use_qk_norm: Cohere's per-head query and key LayerNorms are not modelled yet")
	}
}

// gptOSS reads GPT-OSS's changes to Llama's block (modeling_gpt_oss.py,
// transformers 5.17): a learned sink logit per head in eager attention
// (GptOssPreTrainedModel has no SDPA path), rotary embeddings over each
// head's two halves, biases on all four attention projections
// (attention_bias), RMSNorms whose weight multiplies the fp32 rows before
// the cast back, and a mixture of experts (num_local_experts) with
// GptOssTopKRouter (a biased linear layer, top k of the logits, softmax
// over them) and GptOssExperts (biases, interleaved gate and up columns,
// the clamped gate). The released checkpoints store the experts in MXFP4
// (quantization_config); training dequantizes them to the model's dtype
// (Mxfp4Config(dequantize=True)), which is what memplan simulates.
// output_router_logits (the auxiliary load-balancing loss) is refused.
func (c *hfConfig) gptOSS(m *Model) {
	m.AttnSinks, m.RoPEHalves, m.NormProductFP32 = true, true, true
	m.OutBias, m.MLPBias = m.AttentionBias, true
	m.Router, m.ExpertGate = RouterTopKSoftmax, GateClamped
	if c.bool("output_router_logits", false) {
		c.fail("output_router_logits: the router's auxiliary load-balancing loss is not modelled yet")
	}
}

// deepseekV3 reads DeepseekV3Config (modeling_deepseek_v3.py, transformers
// 5.17): multi-head latent attention (deepseekMLA) with interleaved rotary
// pairs (rope_interleave), n_routed_experts of moe_intermediate_size with
// DeepseekV3TopkRouter (sigmoid scores, n_group groups of which
// topk_group are kept) and n_shared_experts run after them. Defaults are
// DeepseekV3Config's.
func (c *hfConfig) deepseekV3(m *Model) {
	c.deepseekMLA(m, deepseekDefaults{moe: 2048, dense: 18432, experts: 256, shared: 1, denseLayers: 3})
	m.TopK = c.int("num_experts_per_tok", 8, false)
	m.Router = RouterSigmoidGroup
	m.RouterGroups, m.RouterTopGroups = c.int("n_group", 8, false), c.int("topk_group", 4, false)
	m.RoPEInterleave = c.bool("rope_interleave", true)
	c.routerGroups(m)
}

// glm4MoE reads Glm4MoeConfig (modeling_glm4_moe.py, transformers 5.17;
// GLM-4.5, GLM-4.5-Air, GLM-4.6): Llama's grouped-query attention with
// biases on q, k and v (attention_bias), a partial rotary embedding
// (partial_rotary_factor, 0.5 by default, rotated as GPT-NeoX's
// apply_rotary_pos_emb slices it), optional norms on the query and key
// heads (use_qk_norm, as Qwen3's), and DeepSeek-V3's mixture of experts
// module for module (Glm4MoeTopkRouter is DeepseekV3TopkRouter, Glm4MoeMoE
// DeepseekV3MoE): the first first_k_dense_replace layers dense
// (intermediate_size), the rest n_routed_experts of moe_intermediate_size
// under the grouped sigmoid router with n_shared_experts run after them.
// norm_topk_prob false leaves the top k unrenormalised. The multi-token
// prediction layers (num_nextn_predict_layers) are not built by
// transformers' model. Defaults are Glm4MoeConfig's.
func (c *hfConfig) glm4MoE(m *Model) {
	m.Intermediate = c.int("moe_intermediate_size", 1408, false)
	m.DenseIntermediate = c.int("intermediate_size", 10944, false)
	m.Experts = c.int("n_routed_experts", 128, false)
	m.SharedExpert = c.int("n_shared_experts", 1, false) * m.Intermediate
	m.SharedAfter = true
	m.DenseLayers = min(c.count("first_k_dense_replace", 1), m.NumLayers)
	m.TopK = c.int("num_experts_per_tok", 8, false)
	m.Router = RouterSigmoidGroup
	m.RouterGroups, m.RouterTopGroups = c.int("n_group", 1, false), c.int("topk_group", 1, false)
	m.RouterNoRenorm = !c.bool("norm_topk_prob", true)
	c.routerGroups(m)
	m.QKNorm = c.bool("use_qk_norm", false)
	m.QKNormLate = m.QKNorm // q_norm and k_norm after all three projections
	m.Rotary = c.partialRotary()
	if m.Rotary == 1 {
		m.Rotary = 0 // every dim rotated: Llama's rotation
	}
	if m.DenseLayers == 0 {
		m.DenseIntermediate = 0
	}
}

// llama4 reads Llama4TextConfig (modeling_llama4.py, transformers 5.17;
// the language model of Llama 4 Scout and Maverick): Llama's block whose
// MLP is Llama4TextMoe on every layer (interleave_moe_layer_step 1, as
// Scout's) or on every step-th, the others Llama4TextMLP of
// intermediate_size_mlp (Maverick's 2: Model.MoEInterleave), its
// experts run densely (every token through each of num_local_experts
// experts of intermediate_size, weighted by the sigmoid of its top
// num_experts_per_tok logits, zero elsewhere) beside an ungated shared
// expert of intermediate_size added after them; the rotary embedding a
// complex table each head is rotated by as complex pairs, left out of
// every no_rope_layer_interval-th layer (no_rope_layers); those NoPE
// layers attend over the whole sequence, the others in chunks of
// attention_chunk_size (layer_types chunked_attention: a mask from the
// chunk's length on and a cache layer that keeps a chunk, as a sliding
// window's); use_qk_norm normalises each rotated query and key head
// without a weight, and attn_temperature_tuning scales the NoPE layers'
// queries by their positions. Defaults are Llama4TextConfig's.
func (c *hfConfig) llama4(m *Model) {
	m.Experts = c.int("num_local_experts", 16, false)
	m.TopK = c.int("num_experts_per_tok", 1, false)
	m.SharedExpert, m.SharedAfter = m.Intermediate, true
	m.Router, m.DenseExperts, m.RoPEComplex = RouterTopKSigmoid, true, true
	step := c.int("interleave_moe_layer_step", 1, false)
	if step > 1 {
		// Maverick's: every step-th layer sparse, the others
		// Llama4TextMLP of intermediate_size_mlp.
		m.MoEInterleave, m.DenseIntermediate = step, c.int("intermediate_size_mlp", 16384, false)
	}
	if v, ok := c.raw["moe_layers"].([]any); ok && !interleaved(v, step, m.NumLayers) {
		c.fail("moe_layers: experts on layers other than every interleave_moe_layer_step-th are not modelled")
	}
	c.noRoPE(m)
	m.QKL2Norm = c.bool("use_qk_norm", true)
	// The temperature scales the NoPE layers' queries: none without them.
	m.AttnTemperature = c.truthy("attn_temperature_tuning", true) && m.NoRoPEPattern > 0
	m.SlidingWindow, m.SlidingPattern = 0, 0
	if chunk := c.count("attention_chunk_size", 8192); chunk > 0 {
		// The chunked layers are the rotating ones (Llama4TextConfig's
		// default layer_types), every one but each P-th, or every one.
		m.SlidingWindow, m.SlidingPattern = chunk, m.NoRoPEPattern
	}
	if types, ok := c.raw["layer_types"].([]any); ok && len(types) > 0 {
		chunked := make([]bool, len(types))
		for i, t := range types {
			chunked[i] = t == "chunked_attention"
		}
		if p, fits := exceptEvery(chunked); !fits || p != m.NoRoPEPattern || m.SlidingWindow == 0 {
			c.fail("layer_types: chunked attention on layers other than the rotating ones is not modelled")
		}
	}
}

// deepseekV2 reads DeepseekV2Config (modeling_deepseek_v2.py, transformers
// 5.17; DeepSeek-V2, DeepSeek-V2-Lite, DeepSeek-Coder-V2): the latent
// attention of deepseekMLA with its rotary dims rotated as complex numbers
// (apply_rotary_emb), and DeepseekV2TopkRouter: softmax scores, the top
// num_experts_per_tok (topk_method greedy) or the top among the topk_group
// of n_group groups with the best single score (group_limited_greedy),
// scaled, never renormalised (its forward does not read norm_topk_prob).
// Defaults are DeepseekV2Config's; num_experts_per_tok has none there.
// mlp_bias (biases on the dense and shared MLPs) is refused.
func (c *hfConfig) deepseekV2(m *Model) {
	c.deepseekMLA(m, deepseekDefaults{moe: 1407, dense: 11008, experts: 64, shared: 2})
	m.TopK = c.int("num_experts_per_tok", 0, true)
	m.RoPEComplex = true
	switch method := c.str("topk_method", "greedy"); method {
	case "greedy":
		m.Router = RouterSoftmaxGreedy
	case "group_limited_greedy":
		m.Router = RouterSoftmaxGroup
		m.RouterGroups, m.RouterTopGroups = c.int("n_group", 0, true), c.int("topk_group", 0, true)
		c.routerGroups(m)
	default:
		c.fail("topk_method %q: DeepseekV2TopkRouter knows greedy and group_limited_greedy", method)
	}
	if m.MLPBias {
		c.fail("mlp_bias: biases on DeepSeek-V2's dense and shared MLPs are not modelled yet")
	}
}

// routerGroups refuses, in the config's own names, expert groups the
// router cannot form (model.MoE's check says the same in a spec's).
func (c *hfConfig) routerGroups(m *Model) {
	g, top := m.RouterGroups, m.RouterTopGroups
	if g < 1 || m.Experts%g != 0 || top < 1 || top > g {
		c.fail("n_group %d must divide n_routed_experts (%d), and topk_group %d be 1 to n_group", g, m.Experts, top)
	}
}

// deepseekDefaults are the defaults of what DeepseekV2Config and
// DeepseekV3Config share and set differently: moe_intermediate_size,
// intermediate_size, n_routed_experts, n_shared_experts and
// first_k_dense_replace.
type deepseekDefaults struct{ moe, dense, experts, shared, denseLayers int64 }

// deepseekMLA reads what DeepSeek-V2's and V3's configs share: multi-head
// latent attention (q_lora_rank, null for one query projection;
// kv_lora_rank; qk_nope_head_dim, qk_rope_head_dim, v_head_dim),
// attention_bias on q_a, kv_a and o, the first first_k_dense_replace
// layers dense (intermediate_size), the rest n_routed_experts of
// moe_intermediate_size and n_shared_experts run after them. Grouped-query
// heads (num_key_value_heads below num_attention_heads) are refused.
func (c *hfConfig) deepseekMLA(m *Model, d deepseekDefaults) {
	m.Intermediate = c.int("moe_intermediate_size", d.moe, false)
	m.DenseIntermediate = c.int("intermediate_size", d.dense, false)
	m.Experts = c.int("n_routed_experts", d.experts, false)
	m.SharedExpert = c.int("n_shared_experts", d.shared, false) * m.Intermediate
	m.SharedAfter = true
	m.DenseLayers = min(c.count("first_k_dense_replace", d.denseLayers), m.NumLayers)
	m.KVLoRARank = c.int("kv_lora_rank", 512, false)
	m.QLoRARank = c.count("q_lora_rank", 1536) // null: one query projection
	m.QKNopeDim, m.QKRopeDim = c.int("qk_nope_head_dim", 128, false), c.int("qk_rope_head_dim", 64, false)
	m.VHeadDim = c.int("v_head_dim", 128, false)
	m.HeadDim = m.QKNopeDim + m.QKRopeDim
	m.OutBias = m.AttentionBias
	if m.KVHeads != m.Heads {
		c.fail("num_key_value_heads %d: DeepSeek's latent attention with fewer key/value heads than query heads is not modelled", m.KVHeads)
	}
}

// sliding reads transformers' sliding-window attention: Gemma 2's on
// every other layer (sliding_window, default 4096), Mistral's and
// Mixtral's on every layer when sliding_window is set (Mistral v0.1's
// 4096; null in later versions), or a layer_types list whose sliding
// layers are every layer or all but every P-th. Qwen's use_sliding_window
// (sliding layers from max_window_layers on) is not modelled: an error.
func (c *hfConfig) sliding(m *Model, mt string) {
	switch mt {
	case "gemma2":
		m.SlidingWindow, m.SlidingPattern = c.int("sliding_window", 4096, false), 2
	case "gpt_oss":
		// GptOssConfig's default layer_types alternate from a sliding
		// first layer, as Gemma 2's.
		m.SlidingWindow, m.SlidingPattern = c.int("sliding_window", 128, false), 2
	case "gemma3_text":
		m.SlidingWindow, m.SlidingPattern = c.int("sliding_window", 4096, false), c.int("sliding_window_pattern", 6, false)
	case "mistral", "mixtral", "starcoder2":
		m.SlidingWindow = c.int("sliding_window", 0, false)
	case "olmo3":
		// Olmo3Config's default layer_types: every fourth layer full.
		m.SlidingWindow, m.SlidingPattern = c.int("sliding_window", 4096, false), 4
	case "qwen2", "qwen2_moe", "qwen3", "qwen3_moe":
		if c.bool("use_sliding_window", false) {
			c.fail("use_sliding_window: Qwen's sliding-window layers (from max_window_layers on) are not modelled yet")
		}
	}
	types, ok := c.raw["layer_types"].([]any)
	if !ok || len(types) == 0 {
		return
	}
	var sliding []bool
	for _, t := range types {
		sliding = append(sliding, t == "sliding_attention")
	}
	if !slices.Contains(sliding, true) {
		m.SlidingWindow, m.SlidingPattern = 0, 0 // every layer full
		return
	}
	pattern, fits := exceptEvery(sliding)
	if !fits {
		c.fail("layer_types: sliding and full attention layers in an order memplan does not model (every layer, or all but every P-th)")
		return
	}
	m.SlidingWindow, m.SlidingPattern = c.int("sliding_window", 4096, false), max(pattern, 1)
}

// interleaved says whether moe_layers lists exactly the layers
// Llama4TextConfig's default gives: every step-th, from step−1.
func interleaved(layers []any, step, n int64) bool {
	var want []float64
	for i := step - 1; i < n; i += step {
		want = append(want, float64(i))
	}
	if len(layers) != len(want) {
		return false
	}
	for i, v := range layers {
		if f, ok := v.(float64); !ok || f != want[i] {
			return false
		}
	}
	return true
}

// noRoPE reads SmolLM3's and Llama 4's NoPE layers: no_rope_layers (1: the
// layer rotates, 0: it does not), or without it every
// no_rope_layer_interval-th layer (both configs' default, 4). Patterns other than "all but every
// P-th" are refused, as is use_sliding_window (SmolLM3's sliding layers are
// its NoPE layers, not modelled).
func (c *hfConfig) noRoPE(m *Model) {
	if c.bool("use_sliding_window", false) {
		c.fail("use_sliding_window: SmolLM3's sliding-window layers are not modelled yet")
	}
	list, ok := c.raw["no_rope_layers"].([]any)
	if !ok || len(list) == 0 {
		switch p := c.int("no_rope_layer_interval", 4, false); {
		case p == 1:
			c.fail("no_rope_layer_interval 1: every layer without rotary embeddings is not modelled")
		case p > 1:
			m.NoRoPEPattern = p
		}
		return
	}
	rope := make([]bool, len(list))
	for i, v := range list {
		switch x := v.(type) {
		case float64:
			rope[i] = x != 0
		case bool:
			rope[i] = x
		default:
			c.fail("no_rope_layers: entry %d is %v, want 1 or 0", i, v)
			return
		}
	}
	pattern, fits := exceptEvery(rope)
	if !fits {
		c.fail("no_rope_layers: layers without rotary embeddings in an order memplan does not model (none, or every P-th)")
		return
	}
	m.NoRoPEPattern = pattern
}

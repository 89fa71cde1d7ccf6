package model

import (
	"slices"
	"sort"
	"strings"
)

// Spec is a parsed and validated spec file.
type Spec struct {
	// File is the path the spec was read from, used in messages.
	File     string   `json:"-"`
	Name     string   `json:"name"`
	Model    Model    `json:"model"`
	Training Training `json:"training"`
	Device   Device   `json:"device"`
	// Notes are things the user should know about how the spec was read,
	// such as a decimal "80GB" taken as 80×10⁹ bytes.
	Notes []string `json:"notes,omitempty"`
	// HFType is the transformers model_type a spec was imported from
	// (ParseHF), "" for a spec written as one.
	HFType string `json:"-"`
}

// Model types accepted in a spec's model.type.
const (
	GPT2       = "gpt2"
	Llama      = "llama"
	BERT       = "bert"
	ResNet     = "resnet"
	ViT        = "vit"
	NeoX       = "neox"
	Sequential = "sequential"
)

// ModelTypes lists the accepted model types.
var ModelTypes = []string{GPT2, Llama, BERT, NeoX, ResNet, ViT, Sequential}

// Model describes the network. Fields apply to the types noted; Lower turns
// any of them into the layer tree the estimator walks.
type Model struct {
	Type string `json:"type"`

	// Transformers says the model was read from a transformers config
	// (LoadHF): its parallel layouts run transformers' own forward
	// (RunsTransformersForward), where a spec's Llama-shaped model,
	// written or imported (memplan import), runs torchtitan's Llama.
	Transformers bool `json:"-"`

	// Transformers (gpt2, llama, bert, vit).
	NumLayers     int64   `json:"layers,omitempty"`
	Hidden        int64   `json:"hidden,omitempty"`
	Heads         int64   `json:"heads,omitempty"`
	KVHeads       int64   `json:"kv_heads,omitempty"`
	HeadDim       int64   `json:"head_dim,omitempty"`
	Intermediate  int64   `json:"intermediate,omitempty"`
	Vocab         int64   `json:"vocab,omitempty"`
	Positions     int64   `json:"positions,omitempty"`
	TypeVocab     int64   `json:"type_vocab,omitempty"`
	Tied          bool    `json:"tied"`
	Dropout       float64 `json:"dropout"`
	AttnDropout   float64 `json:"attention_dropout"`
	Activation    string  `json:"activation,omitempty"`
	AttentionBias bool    `json:"attention_bias"`
	MLPBias       bool    `json:"mlp_bias"`
	// QKNorm applies RMSNorm to each head's queries and keys (Qwen3);
	// FusedQKV projects q, k and v with one matrix (Phi-3).
	QKNorm bool `json:"qk_norm,omitempty"`
	// Experts > 0 makes every MLP a mixture of Experts experts (each of size
	// Intermediate), TopK of them per token, plus a shared expert of size
	// SharedExpert when it is set.
	Experts      int64 `json:"experts,omitempty"`
	TopK         int64 `json:"top_k,omitempty"`
	SharedExpert int64 `json:"shared_expert,omitempty"`
	SharedGate   bool  `json:"shared_expert_gate,omitempty"`
	// SharedNorm makes a neox block's attention and MLP read one LayerNorm
	// (Falcon-7B) instead of one each (GPT-NeoX).
	SharedNorm bool `json:"shared_norm,omitempty"`
	// Rotary is the fraction of each head's dimensions that rotary
	// embeddings rotate in a neox model (GPT-NeoX's rotary_pct); 0 or 1
	// rotates whole heads.
	Rotary float64 `json:"rotary,omitempty"`
	// SandwichNorm adds an RMSNorm on each branch's output before the
	// residual add (Gemma 2); LogitSoftcap caps the logits with
	// cap·tanh(logits/cap) (Gemma 2's final_logit_softcapping).
	SandwichNorm bool    `json:"sandwich_norm,omitempty"`
	LogitSoftcap float64 `json:"logit_softcap,omitempty"`
	// NoCache says transformers' forward fills no key/value cache in
	// training: the config's use_cache is false (SmolLM3-3B's), where
	// every other decoder's default fills one (Attention.KVCache).
	NoCache bool `json:"no_cache,omitempty"`
	// PostNorm puts the RMSNorm on each branch's output only, with none
	// before the branch (OLMo 2's block); QKNormWhole normalises the whole
	// query and key projections (heads·head_dim) before they are split
	// into heads, instead of each head (OLMo 2's q_norm and k_norm);
	// NormProductFP32 makes every RMSNorm multiply its weight into the
	// fp32 normalised rows and cast the product back, (w·h).to(dtype),
	// where Llama's casts first, w·h.to(dtype) (OLMo 2's Olmo2RMSNorm).
	// PlainNorm makes a llama model's norms OLMo's: LayerNorms without
	// weight or bias, in fp32 (OlmoLayerNorm).
	PlainNorm       bool `json:"plain_norm,omitempty"`
	PostNorm        bool `json:"post_norm,omitempty"`
	QKNormWhole     bool `json:"qk_norm_whole,omitempty"`
	NormProductFP32 bool `json:"norm_product_fp32,omitempty"`
	// QKNormLate applies the per-head query and key norms (QKNorm) after
	// all three projections, where Qwen3 normalises each projection as it
	// comes (GLM-4 MoE's use_qk_norm; Attention.QKNormLate).
	QKNormLate bool `json:"qk_norm_late,omitempty"`
	// EmbeddingMultiplier, ResidualMultiplier and LogitsScaling are
	// Granite's constants (0: none): the embeddings times the first, each
	// branch's output times the second before the residual add, and the
	// logits divided by the third, each a new tensor whatever its value
	// (modular_granite.py applies them unconditionally).
	EmbeddingMultiplier float64 `json:"embedding_multiplier,omitempty"`
	ResidualMultiplier  float64 `json:"residual_multiplier,omitempty"`
	LogitsScaling       float64 `json:"logits_scaling,omitempty"`
	// RoPEFP32 keeps the rotary tables in fp32 whatever the stream's
	// dtype (OLMo 2's Olmo2RotaryEmbedding); RoPECast casts the rotated
	// queries and keys back to their dtype, a copy where the rotation
	// promoted them (OLMo 2's and 3's apply_rotary_pos_emb).
	RoPEFP32 bool `json:"rope_fp32,omitempty"`
	RoPECast bool `json:"rope_cast,omitempty"`
	// RoPEConcat concatenates each rotated query and key with its
	// unrotated rest even when the rotation covers the whole head, a new
	// head-major tensor (Phi-3's apply_rotary_pos_emb:
	// model.Attention.RoPEConcat).
	RoPEConcat bool `json:"rope_concat,omitempty"`
	// ProjectFirst makes the attention's three projections before it
	// views any of them as heads (OLMo's, Attention.ProjectFirst).
	ProjectFirst bool `json:"project_first,omitempty"`
	// NoRoPEPattern P > 1 leaves the rotary embedding out of every layer
	// i with (i+1) % P == 0 (SmolLM3's NoPE layers, no_rope_layers); 0
	// rotates in every layer.
	NoRoPEPattern int64 `json:"no_rope_pattern,omitempty"`
	// AffineNorm makes a llama model's norms nn.LayerNorm with weight
	// and bias (StarCoder2's); PlainMLP its MLP two projections around
	// the activation (c_fc, act, c_proj) instead of a gated one; OutBias
	// puts a bias on the attention's output projection (StarCoder2's
	// use_bias; attention_bias is the q, k and v projections' alone, as
	// Qwen2 has them).
	AffineNorm bool `json:"layer_norm,omitempty"`
	PlainMLP   bool `json:"plain_mlp,omitempty"`
	OutBias    bool `json:"out_bias,omitempty"`
	// EmbeddingDropout is a llama model's dropout on the embeddings
	// (StarCoder2's embedding_dropout); a llama model's Dropout is on
	// each branch's output inside it, after the attention's output
	// projection and after the MLP (StarCoder2's residual_dropout).
	EmbeddingDropout float64 `json:"embedding_dropout,omitempty"`
	// SplitQKV gives a neox model separate q, k and v projections instead
	// of query_key_value (Phi's); HeadBias puts a bias on the output head
	// (Phi's lm_head). A neox model's Dropout is on each branch's output
	// (Phi's resid_pdrop, GPT-NeoX's hidden_dropout).
	SplitQKV bool `json:"split_qkv,omitempty"`
	HeadBias bool `json:"head_bias,omitempty"`
	// ParallelBlock makes a llama model's block one norm under both the
	// attention and the MLP, x + attn(n) + mlp(n) (Cohere's);
	// CenteredNorm makes its norms CohereLayerNorm (the mean subtracted,
	// no bias, in fp32: model.RMSNorm.Centered); RoPEUpcast rotates fp32
	// copies of the query and key and casts them back
	// (model.Attention.RoPEUpcast); LogitScale multiplies the logits by a
	// constant, a new tensor (Cohere's logit_scale; 0: none).
	ParallelBlock bool    `json:"parallel_block,omitempty"`
	CenteredNorm  bool    `json:"centered_norm,omitempty"`
	RoPEUpcast    bool    `json:"rope_upcast,omitempty"`
	LogitScale    float64 `json:"logit_scale,omitempty"`
	// AttnSinks gives each attention head a learned sink logit that
	// eager attention concatenates to its scores before the softmax and
	// drops after it (GPT-OSS's sinks, model.Attention.Sinks): eager
	// attention only, as transformers runs it. RoPEHalves rotates each
	// head's two halves with cos and sin tables of half a head, x1·cos −
	// x2·sin and x2·cos + x1·sin concatenated (GPT-OSS's
	// _apply_rotary_emb, model.Attention.RoPEHalves). Router and
	// ExpertGate choose the experts' router and gate (model.MoE.Router,
	// model.MoE.Gate; GPT-OSS's "topk_softmax" and "clamped").
	AttnSinks bool `json:"attention_sinks,omitempty"`
	// KVLoRARank > 0 makes the attention DeepSeek's multi-head latent
	// attention (model.MLA): keys and values projected down to
	// KVLoRARank (plus QKRopeDim shared rotary dims), normalised, and up
	// per head to QKNopeDim key and VHeadDim value dims; queries through
	// QLoRARank when set (0: one projection); RoPEInterleave rotates
	// interleaved pairs (DeepSeek-V3's rope_interleave), RoPEComplex as
	// complex numbers (DeepSeek-V2's apply_rotary_emb; without latent
	// attention, every head's dims rotated so: Llama 4's).
	KVLoRARank     int64 `json:"kv_lora_rank,omitempty"`
	QLoRARank      int64 `json:"q_lora_rank,omitempty"`
	QKNopeDim      int64 `json:"qk_nope_head_dim,omitempty"`
	QKRopeDim      int64 `json:"qk_rope_head_dim,omitempty"`
	VHeadDim       int64 `json:"v_head_dim,omitempty"`
	RoPEInterleave bool  `json:"rope_interleave,omitempty"`
	RoPEComplex    bool  `json:"rope_complex,omitempty"`
	// QKL2Norm normalises each rotated query and key head by its root
	// mean square, without a weight, in fp32 cast back, on the layers
	// that rotate (Llama 4's use_qk_norm, Llama4TextL2Norm;
	// Attention.QKL2Norm). AttnTemperature scales the queries of the
	// layers without rotary embeddings by fp32 factors of their positions
	// and casts them back (Llama 4's attn_temperature_tuning;
	// Attention.Temperature). DenseExperts runs every token through every
	// expert, weighted by its router score (Llama 4's Llama4TextExperts;
	// MoE.Dense, with the topk_sigmoid router).
	// MoEInterleave N > 1 gives experts to every N-th layer only (layer i
	// when (i+1) % N == 0), the others a dense gated MLP of
	// DenseIntermediate (Llama 4 Maverick's interleave_moe_layer_step).
	MoEInterleave   int64 `json:"moe_interleave,omitempty"`
	QKL2Norm        bool  `json:"qk_l2_norm,omitempty"`
	AttnTemperature bool  `json:"attn_temperature,omitempty"`
	DenseExperts    bool  `json:"dense_experts,omitempty"`
	// DenseLayers are a mixture of experts' first layers with a dense
	// gated MLP of DenseIntermediate instead of experts (DeepSeek's
	// first_k_dense_replace); SharedAfter runs the shared expert after
	// the routed ones, ungated (DeepseekV3MoE), where Qwen2-MoE runs it
	// first and gates it; RouterGroups and RouterTopGroups are the
	// sigmoid router's expert groups and the groups each token may use
	// (model.RouterSigmoidGroup).
	DenseLayers       int64  `json:"dense_layers,omitempty"`
	DenseIntermediate int64  `json:"dense_intermediate,omitempty"`
	SharedAfter       bool   `json:"shared_expert_after,omitempty"`
	RouterGroups      int64  `json:"router_groups,omitempty"`
	RouterTopGroups   int64  `json:"router_top_groups,omitempty"`
	RoPEHalves        bool   `json:"rope_halves,omitempty"`
	Router            string `json:"router,omitempty"`
	ExpertGate        string `json:"expert_gate,omitempty"`
	// LoRAFusedExperts says that peft (0.21, over transformers 5) adapts
	// this mixture of experts' fused parameters where a LoRA config names
	// the MLP projections: its conversion of transformers 4 names
	// (peft/utils/transformers_weight_conversion.py, for the model types
	// transformers' conversion_mapping.py maps to Mixtral's or
	// Qwen2-MoE's pattern, qwen2_moe itself excepted) turns gate_proj and
	// up_proj into gate_up_proj at twice the rank, down_proj into
	// down_proj, and all-linear's router gate into gate.weight, each a
	// target parameter (ParamWrapper), and leaves the dense and shared
	// MLPs untargeted. The import sets it for deepseek_v2, deepseek_v3,
	// qwen3_moe and mixtral (measured: bench/results/2026-11-27-peft-targets.jsonl).
	LoRAFusedExperts bool `json:"lora_fused_experts,omitempty"`
	// RouterNoRenorm leaves the softmax router's top k unrenormalised
	// (Qwen2MoeTopKRouter and Qwen3's with norm_topk_prob false, as
	// Qwen1.5-MoE's config has it; model.MoE.NoRenorm).
	RouterNoRenorm bool `json:"router_no_renorm,omitempty"`
	// AttnSoftcap caps eager attention's scores with cap·tanh(s/cap)
	// (Gemma 2's attn_logit_softcapping); SDPA ignores it, as
	// transformers' sdpa_attention_forward does.
	AttnSoftcap float64 `json:"attn_softcap,omitempty"`
	// SlidingWindow is the window of transformers' sliding-window
	// attention (sliding_window: Mistral v0.1, Gemma 2), 0 for none, on
	// the layers SlidingPattern picks (Sliding): every layer (0 or 1), or
	// with P > 1 each layer i with (i+1) % P != 0 (Gemma 2 alternates, 2).
	// From the window's length on, transformers gives SDPA a mask for
	// those layers (docs/pytorch-memory.md §4, sliding windows).
	SlidingWindow  int64 `json:"sliding_window,omitempty"`
	SlidingPattern int64 `json:"sliding_pattern,omitempty"`
	// LocalRoPE gives the sliding-window layers a rotary embedding of
	// their own (Gemma 3's rope_local_base_freq): the model's forward
	// makes a second pair of cos and sin tables beside the global one.
	LocalRoPE bool `json:"local_rope,omitempty"`
	// Gemma follows Gemma's conventions (gemma and gemma2): the embeddings
	// are multiplied by √hidden in their dtype (a new tensor), and each
	// RMSNorm applies its weight as 1 + w in fp32 before casting back
	// (model.RMSNorm.Offset).
	Gemma bool `json:"gemma,omitempty"`
	// Roberta follows RoBERTa's conventions in a bert model: position ids
	// are made per sequence from the input ids, so the position rows are
	// looked up per sample (model.Positions.PerBatch).
	Roberta  bool `json:"roberta,omitempty"`
	FusedQKV bool `json:"fused_qkv,omitempty"`
	// FusedGateUp projects the gated MLP's gate and up halves with one
	// matrix, chunked in two (Phi-3's gate_up_proj: GatedMLP.Fused).
	FusedGateUp bool `json:"fused_gate_up,omitempty"`

	// Vision (resnet, vit).
	Depth    int64   `json:"depth,omitempty"`
	Blocks   []int64 `json:"blocks,omitempty"`
	Block    string  `json:"block,omitempty"`
	Width    int64   `json:"width,omitempty"`
	Classes  int64   `json:"classes,omitempty"`
	Channels int64   `json:"channels,omitempty"`
	Patch    int64   `json:"patch,omitempty"`

	// lines maps field names to their spec lines, for errors found after
	// decoding.
	lines map[string]int

	// Sequential: the input per sample and the layers.
	Input  Input   `json:"input,omitempty"`
	Layers []Layer `json:"graph,omitempty"`
}

// Input kinds of the explicit form.
const (
	InputFeatures = "features"
	InputTokens   = "tokens"
	InputImage    = "image"
	// InputSignal is [channels, length] per sample (audio features such
	// as a log-mel spectrogram), the length being training.seq.
	InputSignal = "signal"
)

// Input is what one sample of the explicit form looks like.
type Input struct {
	Kind     string `json:"kind,omitempty"`
	Features int64  `json:"features,omitempty"`
	Channels int64  `json:"channels,omitempty"`
}

// TokenInput reports whether the model takes token ids.
func (m *Model) TokenInput() bool {
	switch m.Type {
	case GPT2, Llama, BERT, NeoX:
		return true
	case Sequential:
		return m.Input.Kind == InputTokens
	}
	return false
}

// SeqInput reports whether the model's input has a length that
// training.seq gives: token ids, or a signal.
func (m *Model) SeqInput() bool {
	return m.TokenInput() || (m.Type == Sequential && m.Input.Kind == InputSignal)
}

// ImageInput reports whether the model takes images.
func (m *Model) ImageInput() bool {
	switch m.Type {
	case ResNet, ViT:
		return true
	case Sequential:
		return m.Input.Kind == InputImage
	}
	return false
}

func oneOf(list []string) string {
	s := append([]string(nil), list...)
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// Sliding reports whether layer (0-based, in the whole model) attends
// through a sliding window of n tokens (SlidingWindow), and n.
func (m *Model) Sliding(layer int64) (n int64, ok bool) {
	return slidingAt(m.SlidingWindow, m.SlidingPattern, layer)
}

// slidingAt is Model.Sliding for a window, a pattern and a layer.
func slidingAt(window, pattern, layer int64) (int64, bool) {
	if window <= 0 {
		return 0, false
	}
	if everyPth(pattern, layer) {
		return 0, false
	}
	return window, true
}

// everyPth says whether layer (0-based) is one of every p-th layers, the
// layers p, 2p, … counted from 1 (p > 1): the full-attention layers of a
// sliding pattern (slidingAt) and the NoPE layers of SmolLM3
// (Attention.RoPEAt).
func everyPth(p, layer int64) bool { return p > 1 && (layer+1)%p == 0 }

// exceptEvery reads a per-layer list that is true on every layer but each
// p-th (everyPth): p, or 0 when every entry is true; ok is false when the
// list follows no such rule (its first entry false included).
func exceptEvery(bs []bool) (p int64, ok bool) {
	first := slices.Index(bs, false)
	switch {
	case first < 0:
		return 0, true
	case first == 0:
		return 0, false
	}
	p = int64(first + 1)
	for i, b := range bs {
		if b == everyPth(p, int64(i)) {
			return 0, false
		}
	}
	return p, true
}

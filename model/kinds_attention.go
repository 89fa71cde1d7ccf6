package model

// KAttention is the self-attention layer kind.
const KAttention = "attention"

func init() {
	register(KAttention, "multi-head self-attention with its projections", func() KindSpec { return &Attention{} })
}

// Attention is multi-head self-attention with its projections.
type Attention struct {
	Dim, Heads, KVHeads, HeadDim int64
	// Bias is on the q, k and v projections, OutBias on the output's.
	Bias, OutBias bool
	RoPE          bool
	// Rotary is the fraction of head_dim that RoPE rotates (0: all).
	Rotary float64
	// SlicedRotary: the module itself slices the rotated part of each
	// query and key head from the rest and keeps both parts bound until
	// it returns (Phi's query_rot and query_pass), where GPT-NeoX's
	// apply_rotary_pos_emb slices and drops them inside.
	SlicedRotary bool
	Causal       bool
	FusedQKV     bool
	// OutFirst registers the output projection before the q, k and v
	// projections (Phi-3's Phi3Attention makes o_proj before qkv_proj):
	// the order the module allocates and lists its parameters in, which
	// FSDP2 unshards them in.
	OutFirst bool
	// Conv1D says the projections are transformers' Conv1D (GPT-2),
	// addmm(bias, x, weight), as Linear.Conv1D.
	Conv1D bool
	// QKNorm applies RMSNorm over head_dim to queries and keys;
	// QKNormOffset makes it Gemma's (weight 1 + w, in fp32: Gemma 3);
	// QKNormWhole makes it one norm over each whole projection
	// (heads·head_dim) before the split into heads, and QKNormFP32 the
	// norm's product in fp32 (OLMo 2, model.RMSNorm.FP32Product).
	// QKNormLate normalises the query and key heads after all three
	// projections (GLM-4 MoE's order; Gemma 3's, which QKNormOffset
	// implies), where Qwen3 normalises each projection as it comes.
	QKNorm, QKNormOffset, QKNormWhole, QKNormFP32, QKNormLate bool
	// QKNormRanks > 1 runs the whole-projection norms (QKNormWhole) of a
	// tensor-parallel rank as OLMo-core's plan does: the rank's column
	// shard of each projection is exchanged all-to-all for the sequence
	// shard of the whole width (DTensor Shard(2) → Shard(1)), normalised
	// there with the whole weight, and exchanged back (Shard(1) →
	// Shard(2)). Set by the tensor-parallel lowering, not a spec key.
	QKNormRanks int64
	// RoPEFP32 keeps the rotary tables fp32 (OLMo 2's rotary embedding);
	// RoPECast casts the rotated query and key back to their dtype (OLMo
	// 2's and 3's apply_rotary_pos_emb).
	RoPEFP32, RoPECast bool
	// RoPEConcat concatenates the rotated part of each query and key with
	// the rest, empty when the whole head rotates, into a new head-major
	// tensor, so a fused SDPA's output is head-major and transformers'
	// transpose(1, 2).contiguous() copies it (Phi-3's
	// apply_rotary_pos_emb; the partial rotary of Rotary < 1 always does).
	RoPEConcat bool
	// RoPEUpcast rotates fp32 copies of the query and key (q.float(),
	// k.float()) and casts the results back (Cohere's
	// apply_rotary_pos_emb).
	RoPEUpcast bool
	// ProjectFirst makes all three projections before any is viewed as
	// heads (OLMo's attention, which may clamp them first: clip_qkv);
	// QKNormWhole implies it (OLMo 2 normalises the whole projections
	// before viewing them).
	ProjectFirst bool
	// KVCache marks attention that fills a key/value cache in training
	// (transformers' GPT-2 with use_cache=True).
	KVCache bool
	// P is the dropout on the attention probabilities.
	P float64
	// OutDropout is a dropout on the output projection inside the module
	// (GPT-2's resid_dropout), before the module's locals are released.
	OutDropout float64
	// Style selects an implementation whose saved tensors differ: "hf"
	// (transformers) or "torch" (nn.MultiheadAttention).
	Style string
	// Softmax is how eager attention computes the probabilities: ""
	// (SoftmaxFP32, Llama's eager_attention_forward: softmax(dtype=fp32),
	// cast back to the query's dtype), SoftmaxValue (GPT-2's: softmax in
	// the scores' dtype, or fp32 under autocast, then cast to the values'
	// dtype) or SoftmaxInput (BERT's: softmax in the scores' dtype, or fp32
	// under autocast, its output going to dropout and the matmul as it is).
	Softmax string
	// Window and WindowPattern are the model's sliding window and the
	// layers it applies to (Model.SlidingWindow, SlidingPattern): the
	// copy of a repeat that is layer i of the model attends through the
	// window when Window > 0 and (WindowPattern ≤ 1 or (i+1) %
	// WindowPattern != 0).
	Window, WindowPattern int64
	// Chunked says the window is Llama 4's chunked attention
	// (attention_chunk_size): transformers' chunked_overlay reads each
	// sample's left padding, so its mask and the combined one are made
	// per sample, [batch, 1, s, s], where a sliding window's are one
	// [1, 1, s, s] grid expanded over the batch.
	Chunked bool
	// LocalRoPE: the sliding-window layers rotate with the model's local
	// rotary tables (Model.LocalRoPE).
	LocalRoPE bool
	// NoRoPEPattern P > 1 leaves the rotary embedding out of the copy of
	// a repeat that is layer i of the model when (i+1) % P == 0
	// (Model.NoRoPEPattern: SmolLM3's NoPE layers); 0 rotates in every
	// layer.
	NoRoPEPattern int64
	// Softcap caps eager attention's scores (Model.AttnSoftcap).
	Softcap float64
	// Sinks gives each head a learned logit (a parameter of heads
	// elements, registered after the output projection) that eager
	// attention concatenates to its masked scores, subtracts the rows'
	// maximum from, and drops after the softmax (GPT-OSS's
	// eager_attention_forward; Model.AttnSinks, which alone sets it).
	Sinks bool
	// RoPEHalves rotates each head as GPT-OSS's _apply_rotary_emb does:
	// the head's halves (chunk) times cos and sin tables of half a head,
	// first·cos − second·sin and second·cos + first·sin, concatenated; the
	// rotary embedding's tables are half a head wide (emb = freqs, no
	// cat). Model.RoPEHalves alone sets it.
	RoPEHalves bool
	// RoPEComplex rotates each query and key head as complex pairs times
	// a complex table, as Llama 4's apply_rotary_emb does (fp32 copies
	// viewed as complex, the products cast back); the rotary embedding
	// makes a complex64 table (Model.RoPEComplex without latent
	// attention). QKL2Norm normalises each rotated query and key head
	// by its root mean square in fp32, without a weight, and casts it
	// back, on the layers that rotate (Llama4TextL2Norm). Temperature
	// scales the queries of the layers that do not rotate by fp32 factors
	// of their positions and casts them back (Llama 4's
	// attn_temperature_tuning).
	RoPEComplex, QKL2Norm, Temperature bool
	// MLA, when set, makes the layer DeepSeek's multi-head latent
	// attention (Model.KVLoRARank alone sets it); HeadDim, KVHeads and
	// FusedQKV are then unused.
	MLA *MLA
}

// MLA is the widths of DeepSeek's multi-head latent attention
// (DeepseekV2Attention, DeepseekV3Attention): queries projected to QRank, normalised and
// projected to heads·(Nope+Rope) (one projection when QRank is 0); keys
// and values projected to KVRank+Rope, the first KVRank normalised and
// projected to heads·(Nope+V), the last Rope rotated and shared by every
// head; Interleave rotates interleaved pairs (rope_interleave), Complex
// rotates pairs as complex numbers times a complex table (DeepSeek-V2's
// apply_rotary_emb).
type MLA struct {
	QRank, KVRank, Nope, Rope, V int64
	Interleave, Complex          bool
}

// SlidingAt reports whether the attention, as layer (0-based) of its
// model, attends through a sliding window, and the window.
func (k *Attention) SlidingAt(layer int64) (int64, bool) {
	return slidingAt(k.Window, k.WindowPattern, layer)
}

// RoPEAt reports whether the attention, as layer (0-based) of its model,
// applies rotary embeddings.
func (k *Attention) RoPEAt(layer int64) bool {
	return k.RoPE && !everyPth(k.NoRoPEPattern, layer)
}

// Eager attention's softmax conventions (Attention.Softmax).
const (
	SoftmaxFP32  = ""
	SoftmaxValue = "value"
	SoftmaxInput = "input"
)

// Kind is the name specs use for the kind.
func (*Attention) Kind() string { return KAttention }

func (k *Attention) decode(a *args, _ *Layer) {
	a.int("dim", &k.Dim, true)
	a.int("heads", &k.Heads, true)
	a.int("kv_heads", &k.KVHeads, false)
	a.int("head_dim", &k.HeadDim, false)
	a.bool("bias", &k.Bias)
	a.bool("out_bias", &k.OutBias)
	a.bool("rope", &k.RoPE)
	a.bool("causal", &k.Causal)
	a.bool("fused_qkv", &k.FusedQKV)
	a.bool("out_first", &k.OutFirst)
	a.bool("qk_norm", &k.QKNorm)
	a.bool("qk_norm_whole", &k.QKNormWhole)
	a.bool("qk_norm_late", &k.QKNormLate)
	a.bool("qk_norm_fp32", &k.QKNormFP32)
	a.bool("rope_fp32", &k.RoPEFP32)
	a.bool("rope_cast", &k.RoPECast)
	a.bool("rope_concat", &k.RoPEConcat)
	a.bool("sliced_rotary", &k.SlicedRotary)
	a.bool("rope_upcast", &k.RoPEUpcast)
	a.bool("project_first", &k.ProjectFirst)
	a.bool("rope_complex", &k.RoPEComplex)
	a.bool("qk_l2_norm", &k.QKL2Norm)
	a.bool("temperature", &k.Temperature)
	a.int("no_rope_pattern", &k.NoRoPEPattern, false)
	a.bool("chunked", &k.Chunked)
	a.bool("kv_cache", &k.KVCache)
	a.float("p", &k.P, 0, 1, false)
	a.float("out_dropout", &k.OutDropout, 0, 1, false)
	if line, ok := a.str("style", &k.Style); ok && k.Style != "hf" && k.Style != "torch" {
		a.e.add(line, "style: unknown attention style %q (valid: hf, torch)", k.Style)
	}
	if line, ok := a.str("softmax", &k.Softmax); ok && k.Softmax != SoftmaxValue && k.Softmax != SoftmaxInput && k.Softmax != "fp32" {
		a.e.add(line, "softmax: unknown eager softmax %q (valid: fp32, value, input)", k.Softmax)
	}
	if k.Softmax == "fp32" {
		k.Softmax = SoftmaxFP32
	}
}

// validate applies the defaults that depend on other fields.
func (k *Attention) validate(e *errs, line int) {
	if k.KVHeads == 0 {
		k.KVHeads = k.Heads
	}
	if k.Style == "" {
		k.Style = "hf"
	}
	if k.HeadDim == 0 && k.Heads > 0 {
		if k.Dim%k.Heads != 0 {
			e.add(line, "attention: heads (%d) must divide dim (%d), or give head_dim", k.Heads, k.Dim)
		}
		k.HeadDim = k.Dim / k.Heads
	}
	if k.Heads > 0 && k.KVHeads > 0 && k.Heads%k.KVHeads != 0 {
		e.add(line, "attention: kv_heads (%d) must divide heads (%d)", k.KVHeads, k.Heads)
	}
	if k.NoRoPEPattern == 1 || k.NoRoPEPattern > 1 && !k.RoPE {
		e.add(line, "attention: no_rope_pattern %d leaves out the rotary embedding of every %d-th layer: it needs rope and a pattern of 2 or more (rope: false rotates in no layer)", k.NoRoPEPattern, k.NoRoPEPattern)
	}
	if k.QKNormLate && (!k.QKNorm || k.QKNormWhole) {
		e.add(line, "attention: qk_norm_late orders per-head query and key norms: it needs qk_norm, not qk_norm_whole")
	}
	if (k.RoPEComplex || k.QKL2Norm || k.Temperature) && (!k.RoPE || k.Style != "hf" || k.QKNorm || k.FusedQKV) {
		e.add(line, "attention: rope_complex, qk_l2_norm and temperature are Llama 4's attention: they need rope, separate projections and no qk_norm")
	}
	if k.Temperature && k.NoRoPEPattern < 2 {
		e.add(line, "attention: temperature scales the queries of the layers without rotary embeddings: it needs no_rope_pattern")
	}
	if k.ProjectFirst && k.QKNorm && !k.QKNormWhole {
		e.add(line, "attention: project_first with per-head qk_norm is no transformers attention (per-head norms view each projection as heads first; use qk_norm_whole)")
	}
}

func (k *Attention) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *Attention) params(*Layer) float64 {
	if m := k.MLA; m != nil {
		d, h := f64(k.Dim), f64(k.Heads)
		qk := h * f64(m.Nope+m.Rope)
		n := d*qk + h*f64(m.V)*d + b64(k.OutBias)*d
		if m.QRank > 0 {
			r := f64(m.QRank)
			n = d*r + b64(k.Bias)*r + r + r*qk + h*f64(m.V)*d + b64(k.OutBias)*d
		}
		kv := f64(m.KVRank + m.Rope)
		return n + d*kv + b64(k.Bias)*kv + f64(m.KVRank) + f64(m.KVRank)*h*f64(m.Nope+m.V)
	}
	q, kv := f64(k.Heads)*f64(k.HeadDim), f64(k.KVHeads)*f64(k.HeadDim)
	d := f64(k.Dim)
	n := d*(q+2*kv) + b64(k.Bias)*(q+2*kv) + q*d + b64(k.OutBias)*d
	if k.Sinks {
		n += f64(k.Heads)
	}
	switch {
	case k.QKNorm && k.QKNormWhole:
		n += (q + kv) * f64(max(k.QKNormRanks, 1)) // the whole widths' weights
	case k.QKNorm:
		n += 2 * f64(k.HeadDim)
	}
	return n
}

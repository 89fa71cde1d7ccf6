package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// HFTypes are the transformers model_types LoadHF reads, with the shorthand
// each maps to.
var HFTypes = map[string]string{
	"gpt2": GPT2, "llama": Llama, "mistral": Llama, "qwen2": Llama, "qwen3": Llama,
	"gemma": Llama, "phi3": Llama, "bert": BERT, "roberta": BERT, "olmo": Llama, "olmo2": Llama, "olmo3": Llama, "granite": Llama,
	"smollm3": Llama, "starcoder2": Llama, "cohere": Llama, "gpt_oss": Llama, "deepseek_v2": Llama, "deepseek_v3": Llama, "glm4_moe": Llama, "llama4_text": Llama,
	"mixtral": Llama, "qwen2_moe": Llama, "qwen3_moe": Llama,
	"gpt_neox": NeoX, "falcon": NeoX, "phi": NeoX, "gemma2": Llama, "gemma3_text": Llama,
}

// hfPending are model types that need layers memplan does not have yet,
// with what they need: asked for, they get that reason instead of a bare
// "unknown model_type".
var hfPending = map[string]string{
	"gemma3":      "a SigLIP vision tower beside the language model (its text_config, model_type gemma3_text, imports the language model alone)",
	"llama4":      "a vision tower beside the language model (its text_config, model_type llama4_text, imports the language model alone)",
	"qwen3_next":  "gated DeltaNet layers beside attention",
	"gpt_bigcode": "multi-query attention in a GPT-2 style block",
	"mamba":       "state-space layers",
	"mamba2":      "state-space layers",
	"t5":          "an encoder-decoder",
}

// IsHFConfig reports whether the file at path is a transformers
// config.json (a JSON object with a model_type) rather than a spec, so
// that commands can take either as their SPEC argument. A file named
// .json that is not JSON is taken for a broken config, so that its JSON
// error (ParseHF's, with the line) is the one reported rather than a YAML
// one; a file that cannot be read is not one: Load then reports why.
func IsHFConfig(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var probe struct {
		ModelType *string `json:"model_type"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return strings.HasSuffix(strings.ToLower(path), ".json") && !json.Valid(data)
	}
	return probe.ModelType != nil
}

// LoadHF reads a transformers config.json and returns the equivalent spec;
// the training setup comes from the overrides (batch and seq are required).
func LoadHF(path string, o Overrides) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseHF(path, data, o)
}

// hfConfig reads typed fields of a config, collecting errors that name them.
type hfConfig struct {
	file string
	raw  map[string]any
	errs ErrorList
}

func (c *hfConfig) fail(format string, args ...any) {
	c.errs = append(c.errs, &Error{File: c.file, Msg: fmt.Sprintf(format, args...)})
}

func (c *hfConfig) int(key string, def int64, required bool) int64 {
	v, ok := c.raw[key]
	if !ok || v == nil {
		if required {
			c.fail("missing field %q", key)
		}
		return def
	}
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) || f <= 0 {
		c.fail("field %q: want a positive whole number, got %v", key, v)
		return def
	}
	return int64(f)
}

// count reads a count that may be zero: def when the field is absent, 0
// when it is null.
func (c *hfConfig) count(key string, def int64) int64 {
	v, ok := c.raw[key]
	switch {
	case !ok:
		return def
	case v == nil:
		return 0
	}
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) || f < 0 {
		c.fail("field %q: want a whole number of 0 or more, got %v", key, v)
		return def
	}
	return int64(f)
}

func (c *hfConfig) float(key string, def float64) float64 {
	if f, ok := c.raw[key].(float64); ok {
		return f
	}
	return def
}

func (c *hfConfig) bool(key string, def bool) bool {
	if b, ok := c.raw[key].(bool); ok {
		return b
	}
	return def
}

// truthy reads a switch Python tests for truth: a boolean, or a number
// (nonzero is on); def when the field is absent, off when it is null.
func (c *hfConfig) truthy(key string, def bool) bool {
	v, ok := c.raw[key]
	if !ok {
		return def
	}
	switch x := v.(type) {
	case bool:
		return x
	case float64:
		return x != 0
	case nil:
		return false
	}
	c.fail("field %q: want a boolean or a number, got %v", key, v)
	return def
}

func (c *hfConfig) str(key, def string) string {
	if s, ok := c.raw[key].(string); ok {
		return s
	}
	return def
}

// ParseHF is LoadHF on bytes already read.
func ParseHF(file string, data []byte, o Overrides) (*Spec, error) {
	c := &hfConfig{file: file}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c.raw); err != nil {
		line := 0
		if se, ok := err.(*json.SyntaxError); ok {
			line = 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		}
		return nil, &Error{File: file, Line: line, Msg: "JSON: " + err.Error()}
	}
	mt := c.str("model_type", "")
	kind, ok := HFTypes[mt]
	if !ok {
		var names []string
		for k := range HFTypes {
			names = append(names, k)
		}
		sort.Strings(names)
		if why, pending := hfPending[mt]; pending {
			return nil, &Error{File: file, Msg: fmt.Sprintf("model_type %q needs %s, which memplan does not model yet (supported: %s)", mt, why, strings.Join(names, ", "))}
		}
		return nil, &Error{File: file, Msg: fmt.Sprintf("unknown model_type %q (supported: %s)", mt, strings.Join(names, ", "))}
	}
	m := Model{Type: kind}
	switch mt {
	case "gpt2":
		c.gpt2(&m)
	case "bert", "roberta":
		c.bert(&m)
		m.Roberta = mt == "roberta"
	case "gpt_neox":
		c.neox(&m)
	case "falcon":
		c.falcon(&m)
	case "phi":
		c.phi(&m)
	default: // Llama-style decoders
		c.llama(&m, mt)
	}
	// Every decoder's config class defaults use_cache to true, and
	// transformers then fills a key/value cache in training too.
	m.NoCache = kind != BERT && !c.bool("use_cache", true)
	act := map[string]string{"gelu": KGELU, "gelu_new": KGELUNew, "gelu_pytorch_tanh": KGELU, "gelu_fast": KGELUNew,
		"relu": KReLU, "silu": KSiLU, "swish": KSiLU, "tanh": KTanh}
	if a, ok := act[m.Activation]; ok {
		m.Activation = a
	} else {
		c.fail("hidden_act %q is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, relu, silu, tanh)", m.Activation)
	}
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	// Render the spec as YAML and parse it, so an imported config is
	// validated exactly like a hand-written spec (heads dividing hidden,
	// overflow, the overrides).
	name := c.str("_name_or_path", strings.TrimSuffix(baseName(file), ".json"))
	seq := min(max(m.Positions, 2048), 2048)
	if m.Type == BERT {
		seq = min(m.Positions, 512)
	}
	training := map[string]any{"batch": 1, "seq": seq, "precision": AMPBF16, "optimizer": AdamW}
	if m.AttnSinks {
		training["attention"] = AttnEager // the only attention transformers runs sinks in
	}
	y, err := m.SpecYAML(name, mt, training)
	if err != nil {
		return nil, err
	}
	s, err := parse(file, y, o, true)
	if err != nil {
		// The rendered spec's line numbers point nowhere the user wrote:
		// the config and the flags are named by the message itself.
		return nil, unlocated(err)
	}
	s.File, s.HFType = file, mt
	if n := c.quantNote(); n != "" {
		s.Notes = append(s.Notes, n)
	}
	return s, nil
}

// quantNote says how a config's quantization_config is taken: a released
// checkpoint's storage format, which memplan does not read.
func (c *hfConfig) quantNote() string {
	q, ok := c.raw["quantization_config"].(map[string]any)
	if !ok {
		return ""
	}
	method, _ := q["quant_method"].(string)
	if method == "mxfp4" {
		return "quantization_config (mxfp4): the experts are simulated dequantized to the run's dtype, as transformers loads them for training (Mxfp4Config(dequantize=True))"
	}
	return fmt.Sprintf("quantization_config (%s) is not read: the weights are simulated in the run's dtype; for LoRA over a quantized base give --quant int8 or nf4 (bitsandbytes)", method)
}

// gpt2 reads transformers' GPT2Config.
func (c *hfConfig) gpt2(m *Model) {
	m.NumLayers, m.Hidden, m.Heads = c.int("n_layer", 0, true), c.int("n_embd", 0, true), c.int("n_head", 0, true)
	m.Vocab, m.Positions = c.int("vocab_size", 0, true), c.int("n_positions", 1024, false)
	m.Intermediate = c.int("n_inner", 4*m.Hidden, false)
	m.Dropout, m.AttnDropout = c.float("resid_pdrop", 0.1), c.float("attn_pdrop", 0.1)
	m.Tied, m.Activation = c.bool("tie_word_embeddings", true), c.str("activation_function", "gelu_new")
}

// bert reads BertConfig and RobertaConfig.
func (c *hfConfig) bert(m *Model) {
	m.NumLayers, m.Hidden, m.Heads = c.int("num_hidden_layers", 0, true), c.int("hidden_size", 0, true), c.int("num_attention_heads", 0, true)
	m.Vocab, m.Intermediate = c.int("vocab_size", 0, true), c.int("intermediate_size", 0, true)
	m.Positions, m.TypeVocab = c.int("max_position_embeddings", 512, false), c.int("type_vocab_size", 2, false)
	m.Dropout, m.AttnDropout = c.float("hidden_dropout_prob", 0.1), c.float("attention_probs_dropout_prob", 0.1)
	m.Tied, m.Activation = c.bool("tie_word_embeddings", true), c.str("hidden_act", "gelu")
}

// neox reads GPTNeoXConfig.
func (c *hfConfig) neox(m *Model) {
	m.NumLayers, m.Hidden, m.Heads = c.int("num_hidden_layers", 0, true), c.int("hidden_size", 0, true), c.int("num_attention_heads", 0, true)
	m.Vocab, m.Intermediate = c.int("vocab_size", 0, true), c.int("intermediate_size", 0, true)
	m.KVHeads, m.Tied = m.Heads, c.bool("tie_word_embeddings", false)
	m.AttentionBias = c.bool("attention_bias", true)
	m.MLPBias, m.Activation = m.AttentionBias, c.str("hidden_act", "gelu")
	m.Rotary = c.float("rotary_pct", 0.25)
	if m.Rotary <= 0 || m.Rotary > 1 {
		c.fail("field \"rotary_pct\": want a fraction in (0, 1], got %g", m.Rotary)
	}
	if !c.bool("use_parallel_residual", true) {
		c.fail("use_parallel_residual false (sequential GPT-NeoX blocks) is not modelled yet")
	}
}

// phi reads PhiConfig (modeling_phi.py): GPT-NeoX's parallel block over
// one LayerNorm (PhiDecoderLayer: attention and MLP both read
// input_layernorm's output), separate q, k and v projections, biases on
// every projection and on lm_head, partial rotary embeddings
// (partial_rotary_factor, default 0.5), resid_pdrop on each branch's
// output and embd_pdrop on the embeddings. qk_layernorm is refused.
func (c *hfConfig) phi(m *Model) {
	m.NumLayers, m.Hidden, m.Heads = c.int("num_hidden_layers", 0, true), c.int("hidden_size", 0, true), c.int("num_attention_heads", 0, true)
	m.Vocab, m.Intermediate = c.int("vocab_size", 0, true), c.int("intermediate_size", 0, true)
	m.KVHeads, m.Tied = c.int("num_key_value_heads", m.Heads, false), c.bool("tie_word_embeddings", false)
	m.SharedNorm, m.SplitQKV, m.HeadBias, m.AttentionBias, m.MLPBias = true, true, true, true, true
	m.Activation = c.str("hidden_act", "gelu_new")
	m.Rotary = c.partialRotary()
	m.Dropout, m.EmbeddingDropout, m.AttnDropout = c.float("resid_pdrop", 0), c.float("embd_pdrop", 0), c.float("attention_dropout", 0)
	if c.bool("qk_layernorm", false) {
		c.fail("qk_layernorm: Phi's LayerNorms on the queries and keys are not modelled yet")
	}
}

// partialRotary reads partial_rotary_factor, the fraction of each head
// the rotary embedding rotates: at the top level or in rope_parameters
// (transformers 5 moves it there), 0.5 by default (PhiConfig's and
// Glm4MoeConfig's).
func (c *hfConfig) partialRotary() float64 {
	f := c.float("partial_rotary_factor", 0.5)
	if rp, ok := c.raw["rope_parameters"].(map[string]any); ok {
		if v, ok := rp["partial_rotary_factor"].(float64); ok {
			f = v
		}
	}
	if f <= 0 || f > 1 {
		c.fail("field \"partial_rotary_factor\": want a fraction in (0, 1], got %g", f)
	}
	return f
}

// falcon reads FalconConfig.
func (c *hfConfig) falcon(m *Model) {
	m.NumLayers = c.int("num_hidden_layers", c.int("n_layer", 0, false), false)
	m.Heads = c.int("num_attention_heads", c.int("n_head", 0, false), false)
	if m.NumLayers == 0 || m.Heads == 0 {
		c.fail("missing field \"num_hidden_layers\" or \"num_attention_heads\"")
	}
	m.Hidden, m.Vocab = c.int("hidden_size", 0, true), c.int("vocab_size", 0, true)
	m.Intermediate = c.int("ffn_hidden_size", 4*m.Hidden, false)
	m.Tied, m.Activation = c.bool("tie_word_embeddings", true), c.str("activation", "gelu")
	m.AttentionBias = c.bool("bias", false)
	m.MLPBias = m.AttentionBias
	if !c.bool("parallel_attn", true) {
		c.fail("parallel_attn false (sequential Falcon blocks) is not modelled yet")
	}
	switch {
	case c.bool("new_decoder_architecture", false):
		m.KVHeads = c.int("num_kv_heads", m.Heads, false)
		if c.int("num_ln_in_parallel_attn", 2, false) == 1 {
			m.SharedNorm = true
		}
	case c.bool("multi_query", true):
		m.KVHeads, m.SharedNorm = 1, true
	default:
		m.KVHeads, m.SharedNorm = m.Heads, true
	}
}

// llama reads Llama-style decoders (Llama, Mistral, Qwen, Gemma, Phi-3, Mixtral).
func (c *hfConfig) llama(m *Model, mt string) {
	m.NumLayers, m.Hidden, m.Heads = c.int("num_hidden_layers", 0, true), c.int("hidden_size", 0, true), c.int("num_attention_heads", 0, true)
	m.Vocab, m.Intermediate = c.int("vocab_size", 0, true), c.int("intermediate_size", 0, true)
	m.KVHeads = c.int("num_key_value_heads", m.Heads, false)
	hd := int64(0)
	if m.Heads > 0 {
		hd = m.Hidden / m.Heads
	}
	m.HeadDim = c.int("head_dim", hd, false)
	gemma := mt == "gemma" || mt == "gemma2" || mt == "gemma3_text"
	// Starcoder2Config and CohereConfig, like Gemma's, tie the head to
	// the embeddings unless told otherwise.
	m.Tied = c.bool("tie_word_embeddings", gemma || mt == "starcoder2" || mt == "cohere")
	m.Gemma = gemma
	c.blockFamily(m, mt)
	c.sliding(m, mt)
	m.AttentionBias = c.bool("attention_bias", mt == "qwen2" || mt == "qwen2_moe" || mt == "gpt_oss")
	m.MLPBias = c.bool("mlp_bias", false)
	m.AttnDropout = c.float("attention_dropout", 0)
	m.Activation = c.str("hidden_act", c.str("hidden_activation", "silu"))
	m.QKNorm = m.QKNorm || mt == "qwen3" || mt == "qwen3_moe"
	// Phi-3's apply_rotary_pos_emb slices the rotated part and
	// concatenates it back with the rest, whatever the rotated fraction.
	m.FusedQKV, m.FusedGateUp, m.RoPEConcat = mt == "phi3", mt == "phi3", mt == "phi3"
	switch mt {
	case "starcoder2":
		c.starcoder2(m)
	case "cohere":
		c.cohere(m)
	case "gpt_oss":
		c.gptOSS(m)
	case "deepseek_v2":
		c.deepseekV2(m)
	case "deepseek_v3":
		c.deepseekV3(m)
	case "glm4_moe":
		c.glm4MoE(m)
	case "llama4_text":
		c.llama4(m)
	}
	// peft's conversion of these types' MLP targets to their fused
	// experts (Model.LoRAFusedExperts).
	m.LoRAFusedExperts = mt == "deepseek_v2" || mt == "deepseek_v3" || mt == "glm4_moe" || mt == "qwen3_moe" || mt == "mixtral"
	switch mt {
	case "mixtral", "gpt_oss":
		m.Experts, m.TopK = c.int("num_local_experts", 0, true), c.int("num_experts_per_tok", 0, true)
		if mt == "mixtral" {
			m.Router = RouterSoftmaxTopKFP32 // MixtralTopKRouter keeps its weights fp32
		}
	case "deepseek_v2", "deepseek_v3", "glm4_moe", "llama4_text":
		// deepseekV2, deepseekV3, glm4MoE and llama4 read them.
	case "qwen2_moe", "qwen3_moe":
		m.Experts, m.TopK = c.int("num_experts", 0, true), c.int("num_experts_per_tok", 0, true)
		// Qwen2MoeConfig's and Qwen3MoeConfig's default is false.
		m.RouterNoRenorm = !c.bool("norm_topk_prob", false)
		m.Intermediate = c.int("moe_intermediate_size", 0, true)
		if mt == "qwen2_moe" {
			m.SharedExpert, m.SharedGate = c.int("shared_expert_intermediate_size", 0, true), true
		}
		if v, ok := c.raw["mlp_only_layers"].([]any); ok && len(v) > 0 {
			c.fail("mlp_only_layers: dense layers inside a mixture-of-experts model are not modelled yet")
		}
		if step := c.int("decoder_sparse_step", 1, false); step != 1 {
			c.fail("decoder_sparse_step %d: only every layer sparse (1) is modelled", step)
		}
	}
}

// blockFamily sets what a llama-type model_type changes in Llama's block:
// Gemma 2's and 3's sandwich norms and softcaps, OLMo's norms and rotary
// embedding, Granite's constants.
func (c *hfConfig) blockFamily(m *Model, mt string) {
	switch mt {
	case "gemma2":
		m.SandwichNorm = true
		m.LogitSoftcap = c.float("final_logit_softcapping", 30)
		m.AttnSoftcap = c.float("attn_logit_softcapping", 50)
	case "gemma3_text":
		// Gemma 2's block with Gemma's norms on the queries and keys, no
		// softcapping by default, and a second rotary embedding for the
		// sliding layers.
		m.SandwichNorm, m.QKNorm, m.LocalRoPE = true, true, true
		m.LogitSoftcap = c.float("final_logit_softcapping", 0)
		m.AttnSoftcap = c.float("attn_logit_softcapping", 0)
	case "olmo":
		// Llama with OlmoLayerNorm: no weight or bias, in fp32, and the
		// rotary embedding OLMo 2 took from it: fp32 tables, the rotated
		// query and key cast back (modeling_olmo.py; OLMo-1B's allocator
		// history, bench/results/2026-11-27-h100-olmo-traces); q, k and v
		// all projected before any is viewed as heads (its checkpointed
		// histories, bench/results/2026-11-27-h100-olmo-ckpt-traces).
		// clip_qkv clamps q, k and v in place, which is not modelled.
		m.PlainNorm, m.RoPEFP32, m.RoPECast, m.ProjectFirst = true, true, true, true
		if v, ok := c.raw["clip_qkv"]; ok && v != nil {
			c.fail("clip_qkv: OLMo's in-place clamping of q, k and v is not modelled yet (configs with clip_qkv null are)")
		}
	case "olmo2":
		// Olmo2DecoderLayer: a norm after each branch only; q_norm and
		// k_norm over the whole projections; Olmo2RMSNorm's product in
		// fp32; rotary tables left in fp32 and the rotated query and key
		// cast back (modeling_olmo2.py).
		m.PostNorm, m.QKNorm, m.QKNormWhole, m.NormProductFP32, m.RoPEFP32, m.RoPECast = true, true, true, true, true, true
	case "olmo3":
		// OLMo 2's block and sliding windows on all but every fourth
		// layer (layer_types; modular_olmo3.py). In transformers 5.17
		// its rotary tables stay fp32 as OLMo 2's do, and the sliding
		// layers have their own pair, made after the full layers' (the
		// allocator history of Olmo-3-7B,
		// bench/results/2026-11-27-h200-olmo3-traces).
		m.PostNorm, m.QKNorm, m.QKNormWhole, m.NormProductFP32, m.RoPEFP32, m.RoPECast = true, true, true, true, true, true
		m.LocalRoPE = true
	case "smollm3":
		// Llama whose every no_rope_layer_interval-th layer (NoPE) skips
		// apply_rotary_pos_emb (modeling_smollm3.py: use_rope), the
		// rotary tables made once for the others.
		c.noRoPE(m)
	case "granite":
		// Llama with three constants applied unconditionally
		// (modular_granite.py); attention_multiplier is the attention's
		// scale and costs nothing. GraniteConfig's defaults are 1.0.
		m.EmbeddingMultiplier = c.float("embedding_multiplier", 1)
		m.ResidualMultiplier = c.float("residual_multiplier", 1)
		m.LogitsScaling = c.float("logits_scaling", 1)
	}
}

func baseName(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[i+1:]
	}
	return p
}

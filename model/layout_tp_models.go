package model

// Which models tensor parallelism splits, and through which program:
// torchtitan's plan over Llama's block, or transformers' own forward split
// by bench/torch/dist/hftp.py (docs/parallelism.md §3.1.3–3.1.7).

// TPRefusal says why tensor and context parallelism are not simulated for
// m, or "" when they are: torchtitan's plans shard Llama's block with
// separate q, k and v projections, not the other families' changes to it.
// The families whose layouts run transformers' own forward
// (RunsTransformersForward: GPT-OSS, DeepSeek and GLM-4 MoE, Llama 4,
// Gemma 2 and 3, Granite, SmolLM3, StarCoder2, Cohere, Phi-3, OLMo and OLMo 2 and 3)
// are split by the same plan through it (docs/parallelism.md
// §3.1.3–3.1.7); SeqSplitRefusal says what they still refuse. Sandwich
// norms and logit softcaps other than Gemma's are refused. The spec's
// checks and LowerRank (for every caller, the planner's too) both ask it.
func (m *Model) TPRefusal() string {
	if m.Type != Llama || (m.SandwichNorm && !m.gemmaSandwich()) || (m.LogitSoftcap > 0 && !m.gemmaSandwich()) {
		return m.describe()
	}
	return ""
}

// gemmaSandwich says whether m is Gemma 2's or 3's block (sandwich norms,
// Gemma's conventions; Gemma 2's softcaps), which tensor parallelism
// splits through transformers' own forward (RunsTransformersForward).
func (m *Model) gemmaSandwich() bool { return m.Gemma && m.SandwichNorm }

// gemma3 says whether m is Gemma 3's block: per-head q/k norms and a local
// rotary embedding beside Gemma 2's, whose embedding module scales its
// rows itself (VocabEmbedding.Scale).
func (m *Model) gemma3() bool { return m.gemmaSandwich() && m.LocalRoPE }

// SeqSplitRefusal says why t's layout is not simulated for m, whose
// parallel layouts run transformers' own forward (RunsTransformersForward),
// or "" when it is. That forward makes its rotary tables and masks from the
// length of the hidden states it is handed: sequence parallelism keeps that
// length whole by keeping the residual stream a DTensor sharded along the
// sequence, whose shape is the whole one (bench/torch/dist/hftp.py,
// docs/parallelism.md §3.1.4), inside pipeline stages too (whose stages
// exchange its local shards). Context parallelism hands each rank its part
// of the sequence as a plain tensor (bench/torch/dist/cp.py), for which the
// forward makes its rotary tables, and ring attention replaces SDPA's
// causal kernel, which no mask may replace — so it is simulated for these
// families without sliding windows, experts or latent attention, alone,
// with tensor parallelism inside each cp rank and with FSDP2 over the dp·cp
// ranks (checkCP refuses DDP and ZeRO 1), but not inside pipeline stages,
// as measured (docs/parallelism.md §3.3.1, §3.3.2); a Llama-shaped model
// read from its config (llamaShaped) with its experts and inside pipeline
// stages too, as torchtitan's Llama is.
func (m *Model) SeqSplitRefusal(t *Training) string {
	if !m.RunsTransformersForward() || t.CP <= 1 {
		return ""
	}
	why := ""
	switch {
	case m.SlidingWindow > 0:
		why = "sliding windows, whose masks ring attention does not take"
	case m.Experts > 0 && !m.llamaShaped() || m.KVLoRARank > 0 || m.gptOSS():
		// A Llama-shaped mixture of experts read from its config (Qwen3-MoE,
		// Mixtral) runs transformers' experts block, as the measured
		// moe-llama spec does under context parallelism (common.HFMoE).
		why = "its experts, sinks or latent attention"
	case t.Attention == AttnEager:
		why = "eager attention, which makes no SDPA call for the ring to replace"
	case t.PP > 1 && !m.llamaShaped():
		// A Llama-shaped config's stages differ from torchtitan's
		// measured ones only in the attention's details, which context
		// parallelism alone measured (forty-fourth session).
		why = "pipeline parallelism beside it (not measured)"
	default:
		return ""
	}
	msg := "context parallelism is not simulated for " + m.describe() + " run through transformers' forward with " + why
	if m.llamaShaped() {
		msg += "; written as a spec (memplan import), the model runs torchtitan's Llama, which context parallelism splits"
	}
	return msg
}

// llamaShaped says whether m runs transformers' forward only because it
// was read from a transformers config (Model.Transformers): as a spec its
// layouts would run torchtitan's Llama.
func (m *Model) llamaShaped() bool {
	plain := *m
	plain.Transformers = false
	return m.Transformers && !plain.RunsTransformersForward()
}

// granite says whether m applies any of Granite's constants.
func (m *Model) granite() bool {
	return m.EmbeddingMultiplier > 0 || m.ResidualMultiplier > 0 || m.LogitsScaling > 0
}

// starcoder says whether m has any of StarCoder2's changes to Llama's
// block, which torchtitan's plan does not shard.
func (m *Model) starcoder() bool {
	return m.AffineNorm || m.PlainMLP || m.OutBias || m.Dropout > 0 || m.EmbeddingDropout > 0
}

// cohere says whether m has any of Cohere's changes to Llama's block.
func (m *Model) cohere() bool {
	return m.ParallelBlock || m.CenteredNorm || m.RoPEUpcast || m.LogitScale > 0
}

// gptOSS says whether m has any of GPT-OSS's changes to Llama's block,
// which neither torchtitan's plans nor the pipeline programs memplan is
// measured against carry (its expert-parallel one does: docs/moe.md §9).
func (m *Model) gptOSS() bool {
	return m.AttnSinks || m.RoPEHalves || m.Router == RouterTopKSoftmax || m.ExpertGate != ""
}

// deepseek says whether m has any of DeepSeek-V2's and V3's changes to
// Llama's block (multi-head latent attention, dense first layers, its
// router and shared expert), which neither torchtitan's plans nor the
// pipeline programs memplan is measured against carry (its expert-parallel
// one does: docs/moe.md §11).
func (m *Model) deepseek() bool {
	return m.KVLoRARank > 0 || m.DenseLayers > 0 || ExpertsFirst(m.Router) || m.SharedAfter
}

// llama4 says whether m has any of Llama 4's changes to Llama's block
// (its dense experts and router, whole heads rotated as complex numbers,
// the weightless query and key norm, the queries' temperature). Its
// pipeline stages and tensor-parallel ranks run transformers' forward
// (RunsTransformersForward; hftp.py cuts its dense experts' columns);
// context parallelism (SeqSplitRefusal: its experts) and expert
// parallelism (CheckEP: experts that see every token) are refused, not
// measured.
func (m *Model) llama4() bool {
	return m.DenseExperts || m.QKL2Norm || m.AttnTemperature || m.RoPEComplex && m.KVLoRARank == 0
}

// describe names a model for messages about what a layout supports.
func (m *Model) describe() string {
	switch {
	case m.Type != Llama:
		return m.Type + " models"
	case m.llama4():
		return "Llama 4's block"
	case m.gptOSS():
		return "GPT-OSS's block"
	case m.deepseek() && m.KVLoRARank == 0:
		return "DeepSeek-V3's mixture of experts (GLM-4 MoE's)"
	case m.deepseek():
		return "DeepSeek's block"
	case m.Experts > 0:
		return "a mixture of experts"
	case m.FusedQKV:
		return "a fused qkv projection"
	case m.gemma3():
		return "Gemma 3's block"
	case m.gemmaSandwich():
		return "Gemma 2's block"
	case m.LogitSoftcap > 0:
		return "a logit softcap"
	case m.PlainNorm:
		return "OLMo's block"
	case m.PostNorm || m.QKNormWhole:
		return "OLMo 2's block"
	case m.granite():
		return "Granite's multipliers"
	case m.NoRoPEPattern > 0:
		return "layers without rotary embeddings"
	case m.starcoder():
		return "StarCoder2's block"
	case m.cohere():
		return "Cohere's block"
	}
	return "a transformers config"
}

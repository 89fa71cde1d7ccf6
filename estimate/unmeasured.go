package estimate

import "github.com/memplan/memplan/model"

// unmeasuredModel adds to r the model's parts modelled from source
// alone: Gemma 3 (LocalRoPENote) and eager attention's softcapping
// (AttnSoftcapNote).
func unmeasuredModel(r *Result, spec *model.Spec) {
	if spec.Model.LocalRoPE {
		r.Unmeasured = append(r.Unmeasured, "local_rope")
		r.Notes = append(r.Notes, LocalRoPENote)
	}
	if spec.Model.AttnSoftcap > 0 && spec.Training.Attention == model.AttnEager {
		r.Unmeasured = append(r.Unmeasured, "attn_softcap")
		r.Notes = append(r.Notes, AttnSoftcapNote)
	}
}

// AttnSoftcapNote says how Gemma 2's eager attention (its logit
// softcapping, model.Model.AttnSoftcap, and its second mask) is
// estimated.
const AttnSoftcapNote = "Gemma 2's eager attention is modelled from transformers' source, unmeasured: its logit softcapping (attn_logit_softcapping: the scores divided, tanh kept for backward, multiplied, each a new [batch, heads, seq, seq] tensor) and a second mask for its sliding layers"

// LocalRoPENote says how a Gemma 3 model (model.Model.LocalRoPE) is
// estimated: from parts measured on other models, none on Gemma 3 itself.
const LocalRoPENote = "Gemma 3 is modelled from parts measured on other models (Gemma 2's block and norms, Qwen3's norms on queries and keys, Mistral's and Gemma 2's sliding windows) and its second rotary tables from transformers' source; no Gemma 3 run is measured yet (held-out set 20, bench/torch/heldout20.txt, waits with its predictions)"

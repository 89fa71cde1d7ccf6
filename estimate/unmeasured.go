package estimate

import "github.com/memplan/memplan/model"

// unmeasuredPart is a part of a model estimated from transformers' source
// alone: its key in Result.Unmeasured and the note that says so.
type unmeasuredPart struct{ key, note string }

// modelUnmeasured is spec's model parts that no measurement checks: Gemma
// 3 (model.Model.LocalRoPE) and Gemma 2's eager attention (its logit
// softcapping, model.Model.AttnSoftcap, and its second mask).
func modelUnmeasured(spec *model.Spec) []unmeasuredPart {
	var out []unmeasuredPart
	if spec.Model.LocalRoPE {
		out = append(out, unmeasuredPart{"local_rope", "Gemma 3 is modelled from parts measured on other models (Gemma 2's block and norms, Qwen3's norms on queries and keys, Mistral's and Gemma 2's sliding windows) and its second rotary tables from transformers' source; no Gemma 3 run is measured yet (held-out set 20, bench/torch/heldout20.txt, waits with its predictions)"})
	}
	if spec.Model.AttnSoftcap > 0 && spec.Training.Attention == model.AttnEager {
		out = append(out, unmeasuredPart{"attn_softcap", "Gemma 2's eager attention is modelled from transformers' source, unmeasured: its logit softcapping (attn_logit_softcapping: the scores divided, tanh kept for backward, multiplied, each a new [batch, heads, seq, seq] tensor) and a second mask for its sliding layers"})
	}
	return out
}

// unmeasuredModel adds spec's unmeasured model parts to r (modelUnmeasured).
func unmeasuredModel(r *Result, spec *model.Spec) {
	for _, p := range modelUnmeasured(spec) {
		r.Unmeasured = append(r.Unmeasured, p.key)
		r.Notes = append(r.Notes, p.note)
	}
}

// UnmeasuredModelNotes are the notes Estimate gives for spec's model parts
// that no measurement checks (Gemma 3; Gemma 2's eager attention), for
// commands that print no estimate's notes.
func UnmeasuredModelNotes(spec *model.Spec) []string {
	var out []string
	for _, p := range modelUnmeasured(spec) {
		out = append(out, p.note)
	}
	return out
}

package model

// KnownFailure says why a run of t over m fails in the library versions
// memplan models (torch 2.11, transformers 5.17) for a reason other than
// memory, or "": estimate notes it, tune offers no fix that leads to it
// and plan rules such layouts out.
//
// OLMo's rotary tables stay fp32 (Model.RoPEFP32) and reach each block as
// inputs; FSDP2's bf16 policy casts a unit's floating-point inputs in its
// pre-forward (MixedPrecisionPolicy.cast_forward_inputs) but returns
// early in the pre-backward state, so a checkpointed block's recompute
// gets them in fp32 and torch.utils.checkpoint stops the first backward
// with a CheckpointError (measured on OLMo-2-1B and 7B over fake ranks:
// bench/results/2026-11-29-h200-fake-47/README.md).
func KnownFailure(t *Training, m *Model) string {
	if m.RoPEFP32 && t.Precision == FSDPBF16 && t.Zero >= 2 && t.Checkpointing.Mode != CkptNone {
		return "OLMo's fp32 rotary tables under FSDP2's bf16 policy with checkpointing: torch 2.11 with transformers 5.17 stops the first backward (CheckpointError: the recompute gets the tables uncast, as FSDP2 casts a block's inputs in the forward only); without checkpointing, or in amp-bf16 or bf16, it runs"
	}
	return ""
}

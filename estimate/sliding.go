package estimate

import "github.com/memplan/memplan/model"

// Sliding-window attention past its window (docs/pytorch-memory.md §4,
// "Sliding-window attention"): from the window's length on, transformers
// builds a boolean mask once a forward and gives it to SDPA in each
// sliding layer (model.Attention.SlidingAt), which then repeats the keys
// and values and runs the memory-efficient kernel over the mask converted
// to the query's dtype.

// masked says whether transformers gives SDPA a mask for this layer: it
// attends through a sliding window and the sequence is at least as long
// (sdpa_mask can skip the mask, SDPA's is_causal standing in for it, only
// while the keys are fewer than the window; full-attention layers always
// skip it).
func (a *attnOp) masked(s *sim, seq int64) bool {
	return !s.cfg.eager && a.window > 0 && seq >= a.window
}

// maskedIn says whether an attention layer in ins gets a mask from
// transformers under SDPA at seq tokens (attnOp.masked).
func maskedIn(s *sim, ins []*inst, seq int64) bool {
	for _, in := range ins {
		if a, ok := in.op.(*attnOp); ok && a.masked(s, seq) {
			return true
		}
		for list := range in.sublists() {
			if maskedIn(s, list, seq) {
				return true
			}
		}
	}
	return false
}

// slidingBool is the boolean mask transformers' sdpa_mask builds for the
// sliding-window layers (a, the first of them), once a forward: the
// window's and the causal conditions each evaluated over the whole grid
// and combined (and_masks), two of them live at a time (measured:
// Gemma-2-2B at 4,096 tokens and Mistral-7B v0.1 at batch 2,
// masking_utils.py's inner_mask, and_mask, causal_mask_function, 16 MiB
// each; bench/results/2026-11-27-sliding-traces/). A sliding window's
// grids are [1, 1, seq, seq] whatever the batch (no padding; expanded
// over it as a view); Llama 4's chunk condition reads each sample's left
// padding (model.Attention.Chunked), so it and the combined masks are
// [batch, 1, seq, seq], the causal condition still one grid (measured:
// Llama 4's test shape at 2 × 2,048, 8, 8, 4 and 8 MiB,
// bench/results/2026-11-28-h200-heldout57-traces). Under eager attention
// eagerMask turns it into the additive one (measured: Gemma-2-2B eager,
// bench/results/2026-11-27-gemma-eager-traces).
func (s *sim) slidingBool(seq int64, a *attnOp) *tensor {
	n := seq * seq
	grid := n
	if a != nil && a.k.Chunked {
		grid *= s.cfg.batch
	}
	inner := s.alloc(grid, 1, catTemp, "sliding mask (window)")
	both := s.alloc(grid, 1, catTemp, "sliding mask (and)")
	s.unref(inner)
	causal := s.alloc(n, 1, catTemp, "sliding mask (causal)")
	m := s.alloc(grid, 1, catTemp, "sliding mask")
	s.unref(causal)
	s.unref(both)
	return m
}

// maskedSDPA is transformers' sdpa_attention_forward given a mask (the
// sliding-window layers past their window, attnOp.masked): without
// enable_gqa, repeat_kv copies the keys and values to every query head;
// SDPA converts the boolean mask to an additive one in the query's dtype
// ([batch, 1, s, s], torch.where) and runs the memory-efficient kernel,
// which saves q, the copies, the output, its logsumexp and the converted
// mask, each sliding layer its own, batch-sized (measured: Gemma-2-2B in
// bf16 at 4,096 tokens, Mistral-7B v0.1 at batch 2: 64 MiB a layer at
// 4,096 tokens; bench/results/2026-11-27-sliding-traces/). Its backward
// allocates dq, dk and dv, then the same fp32 dq accumulator and row sums
// as the flash kernel's, all freed when it returns but the gradients
// (measured in bf16: 32.125 MiB in every sliding layer of the Gemma-2-2B
// history, 129 MiB in Mistral's, 32.25 MiB in Llama 4's chunked layers,
// bench/results/2026-11-28-h200-heldout57-traces; the thirty-sixth
// session). In fp32 the memory-efficient kernel also copies the output's
// gradient, as sdpaV's measured (not measured with a mask).
func (s *sim) maskedSDPA(q, k, v *tensor, b, heads, kvHeads, sq, hd int64) *tensor {
	k, v = s.repeatKV(k, v, heads, kvHeads)
	y, _ := s.sdpaKernel(q, k, v, b*sq*heads*hd, b*heads*sq, b*sq*sq, func(qc, _, y *tensor) int64 {
		ws := qc.elems*f32 + b*heads*sq*f32 + sdpaWSExtra
		if s.cfg.compute == f32 {
			ws += y.elems * qc.dt
		}
		return ws
	})
	s.unref(k)
	s.unref(v)
	return y
}

// segmentMasks are the attention masks a checkpointed segment's layers
// take as inputs: transformers passes each decoder layer the mask of its
// kind, so the segment's frame keeps them until the segment's backward
// has recomputed it, and the last frame to die frees each (measured:
// Gemma-2-2B eager, checkpointed: the full layers' mask freed with layer
// 1's frame, the sliding layers' with layer 0's, late in backward,
// bench/results/2026-11-27-gemma-eager-traces). Under eager attention
// every layer takes one (the sliding layers mask2 where the model has
// both kinds); under SDPA the layers that get the boolean sliding mask
// (attnOp.masked).
func (s *sim) segmentMasks(units []*inst, sh model.Shape) (out [2]*tensor) {
	if s.mask == nil || len(sh) == 0 {
		return out
	}
	sliding, full := windowKinds(units)
	switch {
	case !s.cfg.eager:
		if maskedIn(s, units, sh[0]) {
			out[0] = s.mask
		}
	case s.mask2 == nil:
		if sliding || full {
			out[0] = s.mask
		}
	default:
		if full {
			out[0] = s.mask
		}
		if sliding {
			out[1] = s.mask2
		}
	}
	return out
}

// windowKinds says whether ins has attention layers that attend through a
// sliding window, and ones that attend in full.
func windowKinds(ins []*inst) (sliding, full bool) {
	for _, in := range ins {
		if a, ok := in.op.(*attnOp); ok {
			sliding, full = sliding || a.window > 0, full || a.window == 0
		}
		for list := range in.sublists() {
			sl, fu := windowKinds(list)
			sliding, full = sliding || sl, full || fu
		}
	}
	return sliding, full
}

// modelWindowKinds is windowKinds for the model ins belongs to: a layer
// whose kind alternates sliding and full layers (model.Attention's
// WindowPattern) says the model has both, whichever layers ins holds (a
// pipeline stage's share); its forward makes both masks
// (causal_mask_mapping).
func modelWindowKinds(ins []*inst) (sliding, full bool) {
	sliding, full = windowKinds(ins)
	if a := firstWindowed(ins); a != nil && a.k.WindowPattern > 1 {
		return true, true
	}
	return sliding, full
}

// firstWindowed is the first attention layer in ins with a sliding
// window, or nil.
func firstWindowed(ins []*inst) *attnOp {
	for _, in := range ins {
		if a, ok := in.op.(*attnOp); ok && a.k.Window > 0 {
			return a
		}
		for list := range in.sublists() {
			if a := firstWindowed(list); a != nil {
				return a
			}
		}
	}
	return nil
}

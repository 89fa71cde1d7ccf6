package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// DeepSeek-V3's program (modeling_deepseek_v3.py, transformers 5.17; the
// histories in bench/results/2026-11-27-h200-deepseek-traces). Each test
// fails with its part of the program undone.

// moonlight is Moonlight-16B-A3B's first four layers (one dense) at batch
// b and seq tokens in bf16, with o's other settings.
func moonlight(t *testing.T, b, seq int64, o model.Overrides) *model.Spec {
	t.Helper()
	o.Batch, o.Seq, o.Precision = b, seq, model.BF16
	return loadHF(t, "moonlight-4layer.json", o)
}

// TestMLACuDNN: with 192-dim queries and keys and 128-dim values in bf16,
// cuDNN's kernel writes its output heads-major, which
// transpose(1, 2).contiguous() copies (one copy per layer), and its
// backward copies the output's gradient first; in fp32 the
// memory-efficient kernel's output needs no copy.
func TestMLACuDNN(t *testing.T) {
	const b, seq = 1, 256
	out := int64(b * seq * 16 * 128 * 2) // [b, s, heads, v] in bf16
	var copies, gradCopies int
	traced(t, moonlight(t, b, seq, model.Overrides{}), func(s *sim, x *tensor, alloc bool) {
		switch {
		case !alloc || s.phase.Iteration != 0:
		case s.phase.Stage == StageForward && x.name == "contiguous copy" && x.bytes() == out:
			copies++
		case s.phase.Stage == StageBackward && x.name == "attention out" && x.bytes() == out:
			gradCopies++ // runNode's copyIn takes the output's name
		}
	})
	if copies != 4 || gradCopies != 4 {
		t.Errorf("bf16: %d output copies and %d gradient copies in the first step, want 4 and 4", copies, gradCopies)
	}
	o := model.Overrides{Batch: b, Seq: seq, Precision: model.FP32}
	copies = 0
	traced(t, loadHF(t, "moonlight-4layer.json", o), func(s *sim, x *tensor, alloc bool) {
		if alloc && s.phase.Stage == StageForward && x.name == "contiguous copy" && x.bytes() == 2*out {
			copies++
		}
	})
	if copies != 0 {
		t.Errorf("fp32: %d output copies, want none (the memory-efficient kernel)", copies)
	}
}

// TestMLACopySlices: key_states' two in-place copies clone the whole
// gradient in backward: the first copy's node takes it as a temporary
// (nothing earlier to pass it to), the second zeros its slice after its
// gradients.
func TestMLACopySlices(t *testing.T) {
	const b, seq = 1, 256
	full := int64(b * seq * 16 * 192 * 2)
	rope := int64(b * seq * 16 * 64 * 2)
	var clones, zeros int
	traced(t, moonlight(t, b, seq, model.Overrides{}), func(s *sim, x *tensor, alloc bool) {
		if alloc || s.phase.Stage != StageBackward || s.phase.Iteration != 0 || x.prefix != "CopySlices" {
			return
		}
		switch {
		case x.name == " backward temp" && x.bytes() == full:
			clones++
		case x.name == " reduction scratch" && x.bytes() == rope:
			zeros++
		}
	})
	if clones != 4 || zeros != 4 {
		t.Errorf("first step: %d whole-gradient clones and %d zeroed slices, want 4 and 4", clones, zeros)
	}
}

// TestMLALatentHeld: without a cache (checkpointing turns it off) the
// normed latent stays bound to the attention's kv_nope until it returns,
// past the output projection; it goes before the module returns to the
// layer (measured: DeepSeek-V2-Lite's checkpointed pipeline stage,
// bench/results/2026-11-28-h200x4-shape-inference-traces).
func TestMLALatentHeld(t *testing.T) {
	const b, seq = 1, 256
	latent := int64(b * seq * 512 * 2) // [b, s, kv_lora_rank] in bf16
	out := int64(b * seq * 2048 * 2)   // the output projection's [b, s, hidden]
	var last, kvn *tensor              // the latest latent-sized product; the norm's output
	var order []string
	traced(t, moonlight(t, b, seq, model.Overrides{Checkpointing: model.CkptBlock}), func(s *sim, x *tensor, alloc bool) {
		if s.phase.Stage != StageForward || s.phase.Iteration != 0 || len(order) > 0 && order[len(order)-1] == "latent freed" {
			return
		}
		switch {
		case alloc && x.label() == "mul" && x.bytes() == latent && kvn == nil:
			last = x
		case !alloc && kvn == nil && x.label() == "cast of mul" && x.bytes() == latent:
			kvn = last // weight · x.to(bf16), made just before the cast goes
		case !alloc && x == kvn:
			order = append(order, "latent freed")
		case alloc && kvn != nil && x.name == "query_states":
			order = append(order, "query")
		case alloc && kvn != nil && x.name == "matmul out" && x.bytes() == out:
			order = append(order, "output")
		}
	})
	if len(order) < 3 || order[0] != "query" || order[len(order)-2] != "output" || order[len(order)-1] != "latent freed" {
		t.Errorf("first checkpointed forward: %v, want the latent freed after the query states and the output projection", order)
	}
}

// TestMoECastBack: DeepSeek-V3's fp32 routing weights make the experts'
// sum fp32 over a bf16 stream, cast back (.to(hidden_states.dtype)) once
// per sparse layer; Qwen's bf16 weights need no cast.
func TestMoECastBack(t *testing.T) {
	const b, seq = 1, 256
	casts := func(spec *model.Spec) (n int) {
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if !alloc && s.phase.Stage == StageForward && s.phase.Iteration == 0 && x.name == "moe out" && x.prefix == "cast of " {
				n++ // the cast of the fp32 sum, freed after the residual add
			}
		})
		return n
	}
	if n := casts(moonlight(t, b, seq, model.Overrides{})); n != 3 {
		t.Errorf("Moonlight's cut: %d casts of the experts' sum, want 3 (one per sparse layer)", n)
	}
	if n := casts(loadHF(t, "tiny-qwen3-moe.json", model.Overrides{Batch: b, Seq: seq, Precision: model.BF16})); n != 0 {
		t.Errorf("Qwen3-MoE in bf16: %d casts, want none", n)
	}
}

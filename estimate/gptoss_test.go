package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// GPT-OSS's program (modeling_gpt_oss.py, transformers 5.17; measured
// within 0.0% on eight runs, bench/results/2026-11-27-h200-gptoss.jsonl and
// -heldout37.jsonl). Each test fails with its part of the program undone.

// gptOSS is the four-layer cut of gpt-oss-20b at batch b and seq tokens in
// bf16, eager attention (its only one), with o's other settings.
func gptOSS(t *testing.T, b, seq int64, o model.Overrides) *model.Spec {
	t.Helper()
	o.Batch, o.Seq, o.Precision, o.Attention = b, seq, model.BF16, model.AttnEager
	return loadHF(t, "gpt-oss-4layer.json", o)
}

// TestSinkProbs: eager attention concatenates one sink logit per head to
// the scores ([b, heads, s, s+1]), and the difference with the rows'
// maximum (combined_logits) stays bound until eager_attention_forward
// returns, after the output's contiguous copy.
func TestSinkProbs(t *testing.T) {
	const b, seq, heads = 1, 128, 64
	wide := int64(b * heads * seq * (seq + 1) * 2)
	var events []string
	traced(t, gptOSS(t, b, seq, model.Overrides{}), func(s *sim, x *tensor, alloc bool) {
		if s.phase.Stage != StageForward || s.phase.Iteration != 0 || len(events) >= 4 {
			return
		}
		switch {
		case alloc && x.name == "scores with sinks" && x.bytes() == wide:
			events = append(events, "cat")
		case !alloc && x.name == "sub" && x.bytes() == wide:
			events = append(events, "free logits")
		case alloc && x.name == "contiguous copy" && len(events) > 0:
			events = append(events, "copy")
		}
	})
	want := []string{"cat", "copy", "free logits", "cat"}
	for i := range want {
		if i >= len(events) || events[i] != want[i] {
			t.Fatalf("first forward's events %v, want %v", events, want)
		}
	}
}

// TestRoPEHalves: GPT-OSS's rotary tables are half a head wide (emb is
// freqs itself), and no [seq, head_dim] table is made.
func TestRoPEHalves(t *testing.T) {
	const seq, hd = 256, 64
	var half, full int
	traced(t, gptOSS(t, 1, seq, model.Overrides{}), func(s *sim, x *tensor, alloc bool) {
		if !alloc || s.phase.Stage != StageForward {
			return
		}
		switch {
		case x.name == "rope emb":
			full++
		case x.name == "rope cos" && x.bytes() == seq*hd/2*2:
			half++
		}
	})
	if half == 0 || full != 0 {
		t.Errorf("bf16 cos tables of half a head: %d, emb tables: %d; want some and none", half, full)
	}
}

// TestClampedGate: clamp's backward makes a boolean mask per bound before
// its gradient: one of S·I bytes for the gate (max only), two for up (min
// and max), per MoE layer and step.
func TestClampedGate(t *testing.T) {
	const seq = 128
	spec := gptOSS(t, 1, seq, model.Overrides{})
	rows := int64(seq) * 4 * 2880 // S·I: top-4 routing, I = 2880
	var one, pair int
	traced(t, spec, func(s *sim, x *tensor, alloc bool) {
		// A node's temporary carries its node's name once made: count
		// the frees.
		if alloc || s.phase.Stage != StageBackward || x.prefix != "Clamp" || x.bytes() != rows {
			return
		}
		switch x.name {
		case " backward temp":
			one++
		case " backward pair temp":
			pair++
		}
	})
	layers := int(spec.Model.NumLayers)
	if one != 2*layers || pair != 4*layers {
		t.Errorf("clamp masks over two steps: %d single, %d paired; want %d and %d", one, pair, 2*layers, 4*layers)
	}
}

// TestFrozenExpertsSaveNoInput: the grouped GEMM saves its input for its
// weight's gradient only; under LoRA (frozen experts) it saves nothing.
func TestFrozenExpertsSaveNoInput(t *testing.T) {
	saves := func(o model.Overrides) (nodes, saved int) {
		t.Helper()
		traced(t, gptOSS(t, 1, 64, o), func(s *sim, x *tensor, alloc bool) {
			// At the first MoE block's output, its two GEMMs are on the
			// tape with what they saved.
			if nodes > 0 || !alloc || x.name != "moe out" {
				return
			}
			for _, n := range s.tape {
				if n.name == "GroupedMM" {
					nodes++
					saved += len(n.saved)
				}
			}
		})
		return nodes, saved
	}
	if n, k := saves(model.Overrides{}); n != 2 || k != n {
		t.Errorf("trained experts: %d grouped GEMMs saved %d tensors, want two saving one each", n, k)
	}
	if n, k := saves(model.Overrides{LoRA: 8, LoRATargets: model.TargetsAttn}); n != 2 || k != 0 {
		t.Errorf("frozen experts (LoRA): %d grouped GEMMs saved %d tensors, want two saving none", n, k)
	}
}

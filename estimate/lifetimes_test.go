package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestEagerMaskBool: eager attention's additive mask is made from
// sdpa_mask's boolean [1, 1, seq, seq], which lives until the additive
// one exists (masking_utils.py:81 and 604; measured: Llama-3.2-1B eager,
// bench/results/2026-11-27-h200-eagercopy-traces): each forward allocates
// the boolean (seq² bytes), then the mask (batch·seq² in the stream's
// dtype), then frees the boolean.
func TestEagerMaskBool(t *testing.T) {
	const b, seq = 2, 256
	spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: b, Seq: seq, Precision: model.BF16, Attention: "eager"})
	var order []string
	traced(t, spec, func(s *sim, x *tensor, alloc bool) {
		if x.name != "causal mask (bool)" && x.name != "causal mask" {
			return
		}
		switch {
		case alloc && x.name == "causal mask (bool)" && x.bytes() == seq*seq:
			order = append(order, "bool")
		case alloc && x.bytes() == b*seq*seq*2:
			order = append(order, "mask")
		case !alloc && x.name == "causal mask (bool)":
			order = append(order, "free bool")
		}
	})
	want := []string{"bool", "mask", "free bool"}
	if len(order) < 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("mask events %v, want each forward's to begin %v", order, want)
	}
}

// TestEagerOutputGradCopy: eager attention's output gradient comes back
// through transpose(1, 2) strided, and matmul's backward copies it when it
// folds [batch, heads] (measured: OLMo-1B and GPT-2 eager histories): one
// copy per layer and step at batch 2, none with one sequence (a view).
func TestEagerOutputGradCopy(t *testing.T) {
	copies := func(b int64) (n int) {
		t.Helper()
		spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: b, Seq: 256, Precision: model.BF16, Attention: "eager"})
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			// The copy takes the output's name (runNode's copyIn); the
			// output's own gradient is the contiguous copy's.
			if alloc && s.phase.Stage == StageBackward && x.name == "attention out" {
				n++
			}
		})
		return n
	}
	layers := int(load(t, "llama-3.2-1b.yaml", model.Overrides{}).Model.NumLayers)
	if got := copies(2); got != 2*layers {
		t.Errorf("batch 2: %d copies of the output's gradient over two steps, want %d", got, 2*layers)
	}
	if got := copies(1); got != 0 {
		t.Errorf("batch 1: %d copies, want none", got)
	}
}

// TestProjectFirst: OLMo makes q, k and v before viewing any as heads, so
// in backward the views' three gradient copies come before the first
// projection's weight gradient; Llama's order interleaves them (measured:
// OLMo-1B's checkpointed histories, bench/results/2026-11-27-h100-olmo-ckpt-traces).
func TestProjectFirst(t *testing.T) {
	copiesBeforeWeight := func(first bool) int {
		t.Helper()
		spec := loadHF(t, "olmo-1b.json", model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16, Attention: "eager"})
		spec.Model.ProjectFirst = first
		n, on, done := 0, false, false
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if done || !alloc || s.phase.Stage != StageBackward {
				return
			}
			switch {
			case x.name == "o.weight":
				on = true // the last layer's attention, from its output projection on
			case !on:
			case x.name == "v.weight" || x.name == "k.weight" || x.name == "q.weight":
				done = true
			case x.name == "matmul out":
				n++ // a view's reshape copy of its gradient, named by the projection's output
			}
		})
		return n
	}
	if with, without := copiesBeforeWeight(true), copiesBeforeWeight(false); with != 3 || without != 1 {
		t.Errorf("gradient copies before the first projection's weight gradient: %d with project_first, %d without; want 3 and 1", with, without)
	}
}

// TestCohereLayerNorm: CohereLayerNorm, written out in Python, saves three
// fp32 copies of its rows in bf16 (the two differences from the mean, one
// for the power and one for the product, and the normalised rows for the
// weight's gradient) and the weight's fp32 copy, where LlamaRMSNorm saves
// the fp32 rows and their bf16 cast: 6 bytes more per element per norm
// (two per layer and the final one), plus the weights' fp32 copies.
func TestCohereLayerNorm(t *testing.T) {
	est := func(centered bool) *Result {
		t.Helper()
		spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16})
		spec.Model.CenteredNorm = centered
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	m := load(t, "llama-3.2-1b.yaml", model.Overrides{}).Model
	norms := 2*m.NumLayers + 1
	want := 6*256*m.Hidden*norms + 4*m.Hidden*norms
	if d := est(true).ActivationBytes - est(false).ActivationBytes; d != want {
		t.Errorf("CohereLayerNorm saves %d B more than LlamaRMSNorm, want %d", d, want)
	}
}

// TestPhiLocals: PhiAttention keeps the query's and key's projections
// (through query_pass and key_pass) and their rotated parts bound until it
// returns, so the first layer's query projection is freed only after the
// attention's output exists, where GPT-NeoX's apply_rotary_pos_emb, slicing
// inside, lets it go before (measured: phi-2 in AMP,
// bench/results/2026-11-27-h200-phi-traces).
func TestPhiLocals(t *testing.T) {
	spec := loadHF(t, "phi-2.json", model.Overrides{Batch: 2, Seq: 256})
	var q *tensor
	outMade, freedAfter, done := false, false, false
	traced(t, spec, func(s *sim, x *tensor, alloc bool) {
		switch {
		case done || s.phase.Stage != StageForward:
		case alloc && q == nil && x.name == "matmul out":
			q = x // the first layer's query projection
		case alloc && x.name == "attention out":
			outMade = true
		case !alloc && x == q:
			freedAfter, done = outMade, true
		}
	})
	if !done || !freedAfter {
		t.Errorf("the query projection freed (%v) after the attention's output (%v); want both", done, freedAfter)
	}
}

// TestOutputProjectionInputHeld: inside a tensor-parallel attention the
// output projection's input (SDPA's output) is a local the module rebinds
// to the projection's result, so it is freed after RowwiseParallel's
// all-reduce has made its output, not as the product is made (measured:
// Maverick's test shape at tp 2, checkpointed,
// bench/results/2026-11-28-h200x2-tp-llama4/traces). Without tensor
// parallelism nothing waits for a collective.
func TestOutputProjectionInputHeld(t *testing.T) {
	order := func(tp int64) (freedAfterReduce bool) {
		t.Helper()
		spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256, Precision: model.AMPBF16, TP: tp,
			Checkpointing: model.CkptBlock})
		var out *tensor
		reduced, done := false, false
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			switch {
			case done || s.phase.Stage != StageForward:
			case alloc && out == nil && x.name == "attention out":
				out = x // the first layer's
			case alloc && out != nil && x.name == "all-reduce output (TP)":
				reduced = true
			case !alloc && x == out:
				freedAfterReduce, done = reduced, true
			}
		})
		if !done {
			t.Fatalf("tp %d: the first attention's output never freed in the forward", tp)
		}
		return freedAfterReduce
	}
	if !order(2) {
		t.Error("tp 2: the attention's output freed before the output projection's all-reduce; want after")
	}
	if order(1) {
		t.Error("tp 1: an all-reduce before the attention's output was freed; want none")
	}
}

// TestInputsEmbedsHeld: transformers' decoders bind the embeddings to
// inputs_embeds and hand hidden_states = inputs_embeds to the first layer,
// so in bf16, where no layer saves the first layer's input, it is freed
// when the base model returns — after the last layer's attention, before
// the logits — not after the first layer (measured: Phi-3's and Qwen3's
// histories, bench/results/2026-11-29-h200-fake-47). With a scale (Gemma's
// scaled embedding module, Granite's multiplier) the scaled rows are the
// ones held and the looked-up rows go at once.
func TestInputsEmbedsHeld(t *testing.T) {
	for _, tc := range []struct {
		file string
		held string // the name of the tensor the base model keeps
	}{
		{"qwen3-0.6b.json", "embedding"},
		{"phi-3-mini-4k.json", "embedding"},
		{"granite-3.1-2b.json", "scalar op"},
		{"gemma-2-2b.json", "scalar op"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			const b, seq = 1, 256
			spec := loadHF(t, tc.file, model.Overrides{Batch: b, Seq: seq, Precision: model.BF16})
			rows := b * seq * spec.Model.Hidden * 2
			var first, held *tensor
			attnBefore, attnAfter, rowsLate := 0, 0, false
			freed, done := false, false
			traced(t, spec, func(s *sim, x *tensor, alloc bool) {
				switch {
				case done || s.phase.Iteration > 0:
				case s.phase.Stage != StageForward:
					done = freed
				case alloc && first == nil && x.name == "embedding" && x.bytes() == rows:
					first = x
					if tc.held == x.name {
						held = x
					}
				case alloc && first != nil && held == nil && x.name == tc.held && x.bytes() == rows:
					held = x // the embeddings themselves, or their scaled copy
				case alloc && x.name == "attention out" && !freed:
					attnBefore++
				case alloc && x.name == "attention out":
					attnAfter++
				case !alloc && x == first && x != held:
					rowsLate = attnBefore > 0
				case !alloc && x == held:
					freed = true
				}
			})
			if !freed || attnBefore == 0 || attnAfter > 0 {
				t.Errorf("%s freed %v in the first forward, after %d attention outputs and before %d; want after all of them",
					tc.held, freed, attnBefore, attnAfter)
			}
			if rowsLate {
				t.Error("the looked-up rows outlived the first attention; want them freed once scaled")
			}
		})
	}
}

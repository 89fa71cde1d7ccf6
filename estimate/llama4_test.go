package estimate

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// Llama 4's program (modeling_llama4.py, transformers 5.17; measured
// within 0.5% on the tuning grid and 1.6% on held-out set 48,
// bench/results/2026-11-28-h200-llama4.jsonl and -heldout48.jsonl). Each
// test fails with its part of the program undone.

// llama4Spec is the llama shorthand for a four-layer Llama 4 block with
// experts experts of top_k k at batch 1 and seq tokens in bf16.
func llama4Spec(t *testing.T, experts, k, seq int64) *model.Spec {
	t.Helper()
	y := strings.NewReplacer("EXPERTS", itoa(experts), "TOPK", itoa(k), "SEQ", itoa(seq)).Replace(`name: l4
model:
  type: llama
  layers: 4
  hidden: 256
  heads: 4
  kv_heads: 2
  vocab: 1000
  intermediate: 512
  experts: EXPERTS
  top_k: TOPK
  shared_expert: 512
  shared_expert_after: true
  router: topk_sigmoid
  dense_experts: true
  rope_complex: true
  qk_l2_norm: true
  attn_temperature: true
  no_rope_pattern: 4
training: {batch: 1, seq: SEQ, precision: bf16, optimizer: sgd}
`)
	s, err := model.Parse("l4.yaml", []byte(y), model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLlama4ExpertsSeeEveryToken: Llama4TextMoe sends every token through
// every expert (the router's scores are zero outside its top k), so its
// activations do not depend on top_k and grow with the experts: each MoE
// layer saves the repeated rows and their scaled copy (2·E·T·h), gate_up
// (E·T·2I), the activation and the product (E·T·I each).
func TestLlama4ExpertsSeeEveryToken(t *testing.T) {
	const seq = 512
	saved := func(e, k int64) int64 {
		r, err := Estimate(llama4Spec(t, e, k, seq))
		if err != nil {
			t.Fatal(err)
		}
		return r.ActivationBytes
	}
	one, two := saved(8, 1), saved(8, 2)
	if d := two - one; d < 0 || d > 1<<20 {
		t.Errorf("top_k 2 saves %d bytes more than top_k 1, want the same activations but the router's ids", d)
	}
	more := saved(16, 1)
	// Per MoE layer and expert: 2·T·h + 4·T·I bf16 values.
	want := int64(4 * 8 * (2*seq*256 + 4*seq*512) * 2)
	if got := more - one; got < want || got > want+want/50 {
		t.Errorf("8 more experts save %d bytes more, want about %d", got, want)
	}
}

// TestLlama4ComplexRotation: apply_rotary_emb multiplies fp32 copies of
// the query and the key by the complex table and casts both products back
// (return xq_out.type_as(xq), xk_out.type_as(xk)), so the four come in
// that order: the query's product, the key's, then their casts; on the
// NoPE layer of four the temperature makes its six fp32 rows of scales.
func TestLlama4ComplexRotation(t *testing.T) {
	const seq = 256
	q := int64(seq * 4 * 64) // [1, seq, 4 heads, 64]; the key has 2 heads
	type ev struct{ dt, bytes int64 }
	var muls []ev
	temperatures, tables := 0, 0
	traced(t, llama4Spec(t, 4, 1, seq), func(s *sim, x *tensor, alloc bool) {
		if !alloc || s.phase.Stage != StageForward || s.phase.Iteration != 0 {
			return
		}
		switch x.name {
		case "mul":
			muls = append(muls, ev{x.dt, x.bytes()})
		case "attn_scales":
			temperatures++
		case "freqs_cis":
			tables++
		}
	})
	want := []ev{{f32, q * f32}, {f32, q / 2 * f32}, {half, q * half}, {half, q / 2 * half}}
	found := false
	for i := 0; i+len(want) <= len(muls) && !found; i++ {
		found = slices.Equal(muls[i:i+len(want)], want)
	}
	if !found {
		t.Errorf("no rotation making both products before their casts in the forward's products %v", muls)
	}
	if temperatures != 6 {
		t.Errorf("%d attn_scales rows in the first forward, want 6 (one NoPE layer)", temperatures)
	}
	if tables == 0 {
		t.Error("no complex rotary table made in the forward")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestOneExpertShard: FSDP2 shards a block's fused experts along the
// experts, so a single expert over two ranks is one rank's whole (the
// other holds padding), not half of it on each (measured: the tiny Qwen3
// MoE with one expert, bench/results/2026-11-28-h200x2-padded-experts.jsonl,
// within 0.9% since; −9.9% allocated before).
func TestOneExpertShard(t *testing.T) {
	const second, last = 2 * 8192, 1024 // gate_up_proj [1, 2I, h]
	one := &tensor{elems: second * last, second: second, last: last, expert: true}
	if got := padShard(one, 2); got != one.elems {
		t.Errorf("one expert of %d elements: %d on the busiest of two ranks, want the whole", one.elems, got)
	}
	dense := &tensor{elems: second * last, second: second, last: last} // a matrix [2I, h]
	if got := padShard(dense, 2); got != dense.elems/2 {
		t.Errorf("a matrix of %d elements: %d on the busiest of two ranks, want half", dense.elems, got)
	}
	eight := &tensor{elems: 8 * second * last, second: second, last: last, expert: true}
	if got := padShard(eight, 16); got != second*last {
		t.Errorf("eight experts over 16 ranks: %d elements on the busiest, want one expert's %d", got, second*last)
	}
	// Along the second dimension (fsdp_experts dim1 or auto), no expert is
	// padded: each rank holds a sixteenth of every expert's rows.
	eight.dim1 = true
	if got, want := padShard(eight, 16), int64(8*second/16*last); got != want {
		t.Errorf("eight experts over 16 ranks along their second dimension: %d elements, want %d", got, want)
	}
	one.dim1 = true
	if got, want := padShard(one, 3), int64((second+2)/3*last); got != want {
		t.Errorf("one expert over 3 ranks along its second dimension: %d elements, want %d (its rows padded to 3)", got, want)
	}
}

// TestLlama4GradLayouts: Llama 4 rotates before it transposes and
// view_as_complex's backward takes the gradient contiguous, so a rotated
// query or key needs no copy at its projection's view whatever the
// kernel; on a layer without rotary embeddings fused SDPA returns the
// query's gradient in its own layout and only the key (cached or
// repeated, heads-major) comes back strided. Llama's block, rotating
// after the transpose, copies both (measured: the Llama 4 pipeline
// traces, bench/results/2026-11-28-h200x4-pp-llama4-traces).
func TestLlama4GradLayouts(t *testing.T) {
	for _, tt := range []struct {
		name          string
		complex, rope bool
		eager, heads  bool
		wantQ, wantK  bool
	}{
		{"llama 4 rotating, cached", true, true, false, true, false, false},
		{"llama 4 rotating, eager", true, true, true, true, false, false},
		{"llama 4 NoPE, cached", true, false, false, true, false, true},
		{"llama 4 NoPE, uncached", true, false, false, false, false, false},
		{"llama 4 NoPE, eager", true, false, true, true, true, true},
		{"llama rotating, uncached", false, true, false, false, true, true},
		{"llama NoPE, cached", false, false, false, true, true, true},
		{"llama NoPE, uncached", false, false, false, false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &sim{cfg: &config{eager: tt.eager, compute: half}}
			a := &attnOp{k: &model.Attention{RoPEComplex: tt.complex, Heads: 4, KVHeads: 2}, rope: tt.rope}
			q, k := a.sdpaGradLayouts(s, tt.heads)
			if q != tt.wantQ || k != tt.wantK {
				t.Errorf("query, key heads-major: %v, %v; want %v, %v", q, k, tt.wantQ, tt.wantK)
			}
		})
	}
}

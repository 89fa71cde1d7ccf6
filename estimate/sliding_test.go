package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestSlidingWindow: Gemma-2-2B's sliding layers (every other one of 26)
// save for backward, from the window's length on and under SDPA,
// repeat_kv's copies of the keys and values instead of the keys and values
// themselves (which the key/value cache holds anyway), and the mask
// converted to the query's dtype (maskedSDPA). So a forward without
// checkpointing saves exactly that much more than the same model without
// a window: 13 layers of two copies [b, heads, s, head_dim] less the two
// [b, kv_heads, s, head_dim] they repeat, and one [b, 1, s, s] mask, in
// bf16. Below the window nothing changes, nor under eager attention.
func TestSlidingWindow(t *testing.T) {
	saved := func(seq, window int64, o model.Overrides) int64 {
		t.Helper()
		o.Batch, o.Seq, o.Precision = 2, seq, model.BF16
		spec := loadHF(t, "gemma-2-2b.json", o)
		spec.Model.SlidingWindow = window
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		return r.ActivationBytes
	}
	const b, heads, kv, hd, layers = 2, 8, 4, 256, 13
	for _, seq := range []int64{1024, 2048} {
		want := int64(layers) * (2*b*(heads-kv)*seq*hd*2 + b*seq*seq*2)
		if d := saved(seq, seq, model.Overrides{}) - saved(seq, 0, model.Overrides{}); d != want {
			t.Errorf("seq %d at its window: %d B more saved, want %d", seq, d, want)
		}
		if d := saved(seq, seq+1, model.Overrides{}) - saved(seq, 0, model.Overrides{}); d != 0 {
			t.Errorf("seq %d below the window: %d B more saved, want none", seq, d)
		}
		if d := saved(seq, seq, model.Overrides{Attention: "eager"}) - saved(seq, 0, model.Overrides{Attention: "eager"}); d != 0 {
			t.Errorf("seq %d, eager: %d B more saved, want none", seq, d)
		}
	}
}

// TestLocalRoPE: Gemma 3's sliding layers rotate with a second pair of
// cos and sin tables ([seq, head_dim] in bf16), which the model's forward
// makes beside the global pair and which live as long: peak allocated is
// exactly the two tables more than with one rotary embedding (its peak in
// backward, where both pairs are alive).
func TestLocalRoPE(t *testing.T) {
	est := func(local bool) *Result {
		t.Helper()
		spec := loadHF(t, "gemma-3-1b.json", model.Overrides{Batch: 4, Seq: 1024, Precision: model.BF16})
		spec.Model.LocalRoPE = local
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	with, without := est(true), est(false)
	if d, want := with.PeakAllocated-without.PeakAllocated, int64(2*1024*256*2); d != want || with.PeakPhase.Stage != StageBackward {
		t.Errorf("the local tables add %d B to peak allocated, want %d", d, want)
	}
}

// TestAttnSoftcap: Gemma 2's eager attention caps its scores (divide,
// tanh, multiply), and tanh keeps its output for backward: one more
// [b, heads, s, s] tensor in bf16 saved per layer than without the cap
// (measured: held-out set 21); SDPA ignores the cap.
func TestAttnSoftcap(t *testing.T) {
	est := func(cap float64, attn string) *Result {
		t.Helper()
		spec := loadHF(t, "gemma-2-2b.json", model.Overrides{Batch: 1, Seq: 1024, Attention: attn})
		spec.Model.AttnSoftcap = cap
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	with, without := est(50, "eager"), est(0, "eager")
	if d, want := with.ActivationBytes-without.ActivationBytes, int64(26*8*1024*1024*2); d != want {
		t.Errorf("eager softcap saves %d B more, want %d", d, want)
	}
	if a, b := est(50, "sdpa"), est(0, "sdpa"); a.PeakAllocated != b.PeakAllocated {
		t.Errorf("sdpa: %d B with the cap, %d without; want the same", a.PeakAllocated, b.PeakAllocated)
	}
}

// TestEagerMasks: under eager attention transformers materialises a mask
// per kind of layer, so Gemma 2 (full and sliding layers) gets a second
// mask each forward and Mistral v0.1 (sliding layers only) none; SDPA
// builds neither eager mask.
func TestEagerMasks(t *testing.T) {
	count := func(file, attn string) (n int) {
		t.Helper()
		spec := loadHF(t, file, model.Overrides{Batch: 1, Seq: 512, Attention: attn})
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if alloc && x.name == "sliding mask (eager)" {
				n++
			}
		})
		return n
	}
	for _, c := range []struct {
		file, attn string
		want       int
	}{{"gemma-2-2b.json", "eager", 2}, {"mistral-7b-v0.1.json", "eager", 0}, {"gemma-2-2b.json", "sdpa", 0}} {
		if got := count(c.file, c.attn); got != c.want {
			t.Errorf("%s %s: %d second masks over the two steps, want %d", c.file, c.attn, got, c.want)
		}
	}
}

// TestMaskedValueGradCopy: under a sliding window's mask SDPA gets
// repeat_kv's copies, so the value's gradient comes back heads-major and
// its view's backward copies it before the value projection's weight
// gradient; below the window (SDPA with enable_gqa on the projection's own
// view) there is no copy (measured: Mistral-7B v0.1 at 4 × 8,192 tokens,
// bench/results/2026-11-27-h200-mistral-trace).
func TestMaskedValueGradCopy(t *testing.T) {
	copies := func(seq int64) (n int) {
		t.Helper()
		spec := loadHF(t, "mistral-7b-v0.1.json", model.Overrides{Batch: 1, Seq: seq, Precision: model.BF16, Checkpointing: model.CkptBlock})
		kv := spec.Model.KVHeads * spec.Model.HeadDim * seq
		var last *tensor
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if !alloc {
				return
			}
			if x.name == "v.weight" && !x.param && last != nil && last.name == "matmul out" && last.elems == kv {
				n++
			}
			last = x
		})
		return n
	}
	if got := copies(4096); got != 2*32 {
		t.Errorf("at the window (4,096 tokens): %d value gradient copies, want 64 (32 layers, two steps)", got)
	}
	if got := copies(2048); got != 0 {
		t.Errorf("below the window: %d value gradient copies, want none", got)
	}
}

// TestGemma3Attention holds two things Gemma-3-1B's allocator history
// showed (held-out set 20, AMP at 2 × 4,096 tokens): its attention makes
// the three projections one after the other and normalises the query and
// key after them (Qwen3 normalises each right after its projection), and
// repeat_kv of its single key/value head is a view, so under autocast the
// only copies of the repeated keys and values are SDPA's half casts, where
// Mistral's eight heads are copied in fp32 first.
func TestGemma3Attention(t *testing.T) {
	type ev struct {
		name  string
		elems int64
		dt    int64
	}
	forward := func(file string, seq int64, precision string) (allocs []ev, m *model.Model) {
		t.Helper()
		spec := loadHF(t, file, model.Overrides{Batch: 1, Seq: seq, Precision: precision})
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if alloc && s.phase.Iteration == 0 && s.phase.Stage == StageForward {
				allocs = append(allocs, ev{x.name, x.elems, x.dt})
			}
		})
		return allocs, &spec.Model
	}
	// In bf16, where no autocast cast comes between the products.
	g, m := forward("gemma-3-1b.json", 1024, model.BF16)
	q, kv := 1024*m.Heads*m.HeadDim, 1024*m.KVHeads*m.HeadDim
	runs := 0
	for i := 0; i+2 < len(g); i++ {
		if g[i].name == "matmul out" && g[i].elems == q && g[i+1].name == "matmul out" && g[i+1].elems == kv &&
			g[i+2].name == "matmul out" && g[i+2].elems == kv {
			runs++
		}
	}
	if runs != int(m.NumLayers) {
		t.Errorf("Gemma-3-1B: %d layers project q, k and v one after the other, want all %d", runs, m.NumLayers)
	}
	fp32Repeats := func(allocs []ev) (n int) {
		for _, e := range allocs {
			if e.name == "repeat_kv" && e.dt == f32 {
				n++
			}
		}
		return n
	}
	if g, _ = forward("gemma-3-1b.json", 1024, model.AMPBF16); fp32Repeats(g) != 0 {
		t.Errorf("Gemma-3-1B (one key/value head): %d fp32 repeat_kv copies, want none", fp32Repeats(g))
	}
	if mi, _ := forward("mistral-7b-v0.1.json", 4096, model.AMPBF16); fp32Repeats(mi) == 0 {
		t.Errorf("Mistral-7B v0.1 past its window (eight key/value heads): no fp32 repeat_kv copies, want one per key and value")
	}
}

// TestNoRoPE: SmolLM3 leaves the rotary embedding out of every fourth
// layer (no_rope_layers), so a forward rotates the queries and keys of 27
// of its 36 layers: rotate_half's outputs (two per layer, the query's and
// the key's) are three quarters of Llama's with every layer rotating.
func TestNoRoPE(t *testing.T) {
	count := func(pattern int64) (n int) {
		t.Helper()
		spec := loadHF(t, "smollm3-3b.json", model.Overrides{Batch: 1, Seq: 256})
		spec.Model.NoRoPEPattern = pattern
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if alloc && x.name == "rotate_half" {
				n++
			}
		})
		return n
	}
	with, without := count(4), count(0)
	if without == 0 || with*4 != without*3 {
		t.Errorf("rotate_half outputs: %d with every fourth layer NoPE, %d without; want three quarters", with, without)
	}
}

// TestMaskedSDPAWorkspace: the masked layers' memory-efficient backward
// takes the flash kernel's fp32 dq accumulator and row sums, no copy of
// the output's gradient in half precision (measured: 32.125 MiB in each
// of Gemma-2-2B's thirteen sliding layers at 4,096 tokens,
// bench/results/2026-11-27-sliding-traces), and the copy too in fp32
// (as sdpaV's memory-efficient kernel makes it).
func TestMaskedSDPAWorkspace(t *testing.T) {
	const seq, heads, hd = 4096, 8, 256
	q := int64(seq * heads * hd)
	for _, tc := range []struct {
		precision string
		want      int64
	}{
		{model.BF16, q*f32 + heads*seq*f32 + sdpaWSExtra},
		{model.FP32, q*f32 + heads*seq*f32 + sdpaWSExtra + q*f32},
	} {
		n := 0
		traced(t, loadHF(t, "gemma-2-2b.json", model.Overrides{Batch: 1, Seq: seq, Precision: tc.precision}), func(s *sim, x *tensor, alloc bool) {
			if !alloc && s.phase.Iteration == 0 && x.label() == "SDPA backward workspace" && x.bytes() == tc.want {
				n++
			}
		})
		if n != 13 {
			t.Errorf("%s: %d SDPA backward workspaces of %d B in the first backward, want 13 (the sliding layers)", tc.precision, n, tc.want)
		}
	}
}

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
		spec, err := model.LoadHF("../model/testdata/hf/gemma-2-2b.json", o)
		if err != nil {
			t.Fatal(err)
		}
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

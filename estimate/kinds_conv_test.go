package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestConvBiasScratch follows ViT-B/16's patch embedding through each
// backward as PyTorch runs it (bench/results/2026-11-23-h100-traces2/
// vit-ckpt): its gradient arrives channels-last, so the cuDNN call copies
// it and frees the copy when it returns, and convolution_backward then
// sums the strided gradient for the bias: the bias's gradient, then the
// column sum's 132 MiB scratch, allocated and freed.
func TestConvBiasScratch(t *testing.T) {
	s := load(t, "vit-b-16.yaml", model.Overrides{Batch: 128})
	var seq []string
	_, err := estimateWith(s, func(*sim) {}, func(sm *sim) {
		sm.trace = func(x *tensor, alloc bool) {
			if sm.phase.Stage != StageBackward {
				return
			}
			switch l := x.label(); {
			case l == "Convolution backward copy of the gradient" && !alloc:
				seq = append(seq, "free copy")
			case x.name == "patch.bias" && alloc && x.bytes() == 768*2: // bf16, before its fp32 copy
				seq = append(seq, "bias grad")
			case x.name == " bias reduction scratch" && alloc:
				if x.bytes() != 132<<20 {
					t.Errorf("scratch %d B, want 132 MiB", x.bytes())
				}
				seq = append(seq, "scratch")
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"free copy", "bias grad", "scratch", "free copy", "bias grad", "scratch"}
	if len(seq) != len(want) {
		t.Fatalf("events %q, want %q (two steps)", seq, want)
	}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("events %q, want %q", seq, want)
		}
	}
}

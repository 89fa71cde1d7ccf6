package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestCheckpointEarlyStop: torch.utils.checkpoint's recompute stops at the
// last save (earlyStop). In residual-mlp's blocks, `x + relu(linear(x))`,
// the ReLU saves last, so a block's residual add is never recomputed; a
// segment of two blocks recomputes the first block's add (the second
// block's linear saves it) but not the second's. Every gradient still
// reaches the parameters: the adds' nodes are recorded.
func TestCheckpointEarlyStop(t *testing.T) {
	const blocks = 20
	cases := []struct {
		mode string
		adds int // residual adds recomputed per backward pass
	}{
		{model.CkptBlock, 0},
		{"every-2", blocks / 2},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			s := load(t, "residual-mlp.yaml", model.Overrides{Checkpointing: c.mode, Batch: 64})
			var fwd, bwd, passes int
			var stage string
			_, err := estimateWith(s, func(*sim) {}, func(sm *sim) {
				sm.trace = func(x *tensor, alloc bool) {
					if sm.phase.Stage != stage && sm.phase.Stage == StageBackward {
						passes++
					}
					stage = sm.phase.Stage
					if !alloc || x.prefix != "" || x.name != "add" {
						return
					}
					switch {
					case sm.stop.limit > 0: // inside a recompute
						bwd++
					case stage == StageForward:
						fwd++
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if passes == 0 || fwd != blocks*passes {
				t.Fatalf("%d forward adds over %d passes, want %d a pass", fwd, passes, blocks)
			}
			if bwd != c.adds*passes {
				t.Errorf("%d adds recomputed over %d backward passes, want %d a pass", bwd, passes, c.adds)
			}
		})
	}
}

// TestCheckpointEarlyStopGradients: stopping the recompute early loses no
// gradient: every parameter's gradient is allocated in each backward, as
// without checkpointing.
func TestCheckpointEarlyStopGradients(t *testing.T) {
	count := func(mode string) int {
		s := load(t, "residual-mlp.yaml", model.Overrides{Checkpointing: mode, Batch: 64})
		n := 0
		_, err := estimateWith(s, func(*sim) {}, func(sm *sim) {
			sm.trace = func(x *tensor, alloc bool) {
				if alloc && x.prefix == "grad of " && sm.phase.Stage == StageBackward {
					n++
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := count(model.CkptNone), count(model.CkptBlock); a != b {
		t.Errorf("gradients allocated: %d without checkpointing, %d every block", a, b)
	}
}

// TestCheckpointFramesKeepRope: transformers hands every decoder layer the
// model forward's rotary tables (position_embeddings); under
// checkpointing the segments' frames keep them, the model's own reference
// going as its forward returns, so the last frame to die frees them, in
// the first segment's backward, before the embedding's gradient (Llama 4's
// table beside the mask in bench/results/2026-11-28-h200x2-heldout-53).
// Without checkpointing the rotating products' saved tables hold them as
// long.
func TestCheckpointFramesKeepRope(t *testing.T) {
	for _, ck := range []string{model.CkptBlock, model.CkptNone} {
		freed, embedding := -1, -1
		i := 0
		traced(t, load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 512, Precision: model.AMPBF16, Checkpointing: ck}),
			func(s *sim, x *tensor, alloc bool) {
				if s.phase.Iteration != 0 || s.phase.Stage != StageBackward {
					return
				}
				i++
				if !alloc && freed < 0 && x.label() == "rope cos" { // fp32 under AMP
					freed = i
				}
				if alloc && x.name == "embedding.weight" {
					embedding = i // the last: the embedding's own (the tied head's first)
				}
			})
		if freed < 0 || embedding < 0 || freed > embedding {
			t.Errorf("%s: the rotary table freed at backward event %d, the embedding's gradient made at %d; want the table first", ck, freed, embedding)
		}
	}
}

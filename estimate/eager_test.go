package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestEagerCheckpointedLifetimes holds what Gemma-2-2B's allocator history
// under eager attention with every block checkpointed showed
// (bench/results/2026-11-27-gemma-eager-traces), event by event in the
// simulation of a small run:
//   - the attention weights eager_attention_forward returns live until the
//     decoder layer returns: in the first forward each is freed after the
//     layer's MLP activation is made;
//   - the two eager masks are made once a forward, never again in a
//     recompute, and freed in backward, when the checkpoint frames that
//     hold them die;
//   - softmax's saved output outlives its backward's grad * output
//     temporary in a recompute;
//   - every Gemma norm's backward takes a column-sum scratch for the
//     gradient of 1 + weight (105 norms, two steps).
func TestEagerCheckpointedLifetimes(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/gemma-2-2b.json", model.Overrides{
		Batch: 1, Seq: 4608, Precision: model.BF16, Attention: model.AttnEager, Checkpointing: model.CkptBlock})
	if err != nil {
		t.Fatal(err)
	}
	// Labels are final once a tensor is freed (prefixes come after the
	// allocation), so each check is made at a free.
	var (
		sm         *sim
		seq        int
		born       = map[*tensor]int{}
		lastGelu   int
		weights    []bool // per first-forward layer: freed after its MLP's activation
		masksMade  = map[string]int{}
		masksFreed = map[string]string{}
		softAlive  int // recomputed softmax outputs alive when their scratch is freed
		softGone   int
		scratches  int
	)
	_, err = estimateWith(spec, nil, func(s *sim) {
		sm = s
		s.trace = func(x *tensor, alloc bool) {
			seq++
			name := x.label()
			if alloc {
				born[x] = seq
				switch name {
				case "gelu":
					lastGelu = seq
				case "causal mask", "sliding mask (eager)":
					masksMade[name]++
				}
				return
			}
			stage := sm.phase.Stage
			switch {
			case name == "cast of Softmax" && sm.phase.Iteration == 0 && stage == StageForward:
				weights = append(weights, lastGelu > born[x])
			case name == "causal mask" || name == "sliding mask (eager)":
				masksFreed[name] = stage
			case name == "Softmax reduction scratch" && stage == StageBackward:
				alive := false
				for t, b := range born {
					alive = alive || (t.label() == "Softmax" && t.dt == f32 && b < born[x])
				}
				if alive {
					softAlive++
				} else {
					softGone++
				}
			case name == "sum_to scratch" && stage == StageBackward:
				scratches++
			}
			delete(born, x)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, w := range weights {
		if w {
			held++
		}
	}
	if len(weights) != 26 || held != 26 {
		t.Errorf("%d of %d first-forward attention weights held past the layer's MLP; want all 26", held, len(weights))
	}
	for _, name := range []string{"causal mask", "sliding mask (eager)"} {
		if masksMade[name] != 2 || masksFreed[name] != StageBackward {
			t.Errorf("%s: made %d times, last freed in %q; want once a step, freed in backward", name, masksMade[name], masksFreed[name])
		}
	}
	if softAlive == 0 || softGone != 0 {
		t.Errorf("softmax backward's scratch: output alive %d times, already freed %d times; want always alive", softAlive, softGone)
	}
	if want := 2 * (4*26 + 1); scratches != want {
		t.Errorf("%d column-sum scratches in backward, want %d (every Gemma norm, two steps)", scratches, want)
	}
}

package estimate

import (
	"slices"
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
	spec := loadHF(t, "gemma-2-2b.json", model.Overrides{
		Batch: 1, Seq: 4608, Precision: model.BF16, Attention: model.AttnEager, Checkpointing: model.CkptBlock})
	// Labels are final once a tensor is freed (prefixes come after the
	// allocation), so each check is made at a free.
	var (
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
	traced(t, spec, func(s *sim, x *tensor, alloc bool) {
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
		stage := s.phase.Stage
		switch {
		case name == "cast of Softmax" && s.phase.Iteration == 0 && stage == StageForward:
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
	})
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

// TestHeldOut22Mechanisms holds the three mechanisms held-out set 22's
// histories showed (bench/results/2026-11-27-heldout22-traces), in the
// simulated event sequence:
//   - Gemma-2-2B in AMP, checkpointed: each recompute's half tail gradient
//     is freed before the recompute allocates anything (tailBefore);
//   - the rotary tables are built as transformers builds them: freqs, the
//     cuBLAS workspace, emb, then cos and sin (ropeBuild);
//   - Llama-3.2-1B eager in AMP: matmul copies the heads-major query when
//     it folds [batch, heads], at batch 4 and not at batch 1; and the key
//     and value too when no cache or repeat_kv has copied them (GPT-2
//     checkpointed, set 23's history).
func TestHeldOut22Mechanisms(t *testing.T) {
	type event struct {
		alloc bool
		name  string
		dt    int64
		stage string
	}
	run := func(spec *model.Spec) []event {
		t.Helper()
		var ev []event
		live := map[*tensor]int{}
		traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if alloc {
				live[x] = len(ev)
				ev = append(ev, event{true, x.name, x.dt, s.phase.Stage})
				return
			}
			// Labels are final at the free: name the allocation too.
			if i, ok := live[x]; ok {
				ev[i].name = x.label()
				delete(live, x)
			}
			ev = append(ev, event{false, x.label(), x.dt, s.phase.Stage})
		})
		return ev
	}

	gemma := run(loadHF(t, "gemma-2-2b.json", model.Overrides{Batch: 1, Seq: 1024, Checkpointing: model.CkptBlock}))
	// The first recompute: from the first half tail gradient to the next
	// allocation that is not a tail gradient, the half one is freed.
	tails, freed := 0, 0
	for i, e := range gemma {
		if !e.alloc || e.stage != StageBackward || e.name != "grad of segment tail" || e.dt != half {
			continue
		}
		tails++
		for _, f := range gemma[i+1:] {
			if f.alloc && f.name != "grad of segment tail" {
				break
			}
			if !f.alloc && f.name == "grad of segment tail" && f.dt == half {
				freed++
				break
			}
		}
	}
	if tails != 2*26 || freed != tails {
		t.Errorf("Gemma-2-2B: %d half tail gradients, %d freed before their recompute; want 52 and all", tails, freed)
	}
	var rope []string
	for _, e := range gemma {
		if e.alloc && (len(rope) > 0 || e.name == "rope freqs") && len(rope) < 5 {
			rope = append(rope, e.name)
		}
	}
	if want := []string{"rope freqs", "cublas workspace", "rope emb", "rope cos", "rope cos"}; !slices.Equal(rope, want) {
		t.Errorf("rotary tables built as %q, want %q", rope, want)
	}

	for _, c := range []struct {
		batch int64
		want  int
	}{{4, 2 * 16}, {1, 0}} {
		llama := run(load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: c.batch, Seq: 256, Attention: model.AttnEager}))
		copies := 0
		for i, e := range llama {
			if e.alloc && e.stage == StageForward && e.name == "contiguous copy" && i+1 < len(llama) && llama[i+1].name == "scores" {
				copies++
			}
		}
		if copies != c.want {
			t.Errorf("Llama-3.2-1B eager at batch %d: %d query copies before the scores, want %d", c.batch, copies, c.want)
		}
	}
	// GPT-2 checkpointed keeps no key/value cache: its packed projection's
	// heads-major query, key and value are each copied when matmul folds
	// them at batch 2, beside the output's transpose copy every layer makes
	// (bench/results/2026-11-27-heldout23-traces).
	for _, c := range []struct {
		batch int64
		want  int
	}{{2, 4 * 12}, {1, 12}} {
		gpt2 := run(loadHF(t, "gpt2.json", model.Overrides{Batch: c.batch, Seq: 256, Attention: model.AttnEager, Checkpointing: model.CkptBlock}))
		copies := 0
		for _, e := range gpt2 {
			if e.alloc && e.stage == StageForward && e.name == "contiguous copy" {
				copies++
			}
		}
		if copies != 2*c.want { // two steps
			t.Errorf("GPT-2 eager checkpointed at batch %d: %d copies in the forwards, want %d", c.batch, copies, 2*c.want)
		}
	}
}

package estimate

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestSteadyStateExact compares the 1F1B replay that jumps over repeating
// iterations with the full replay, for every stage of 2- and 4-stage
// pipelines over many micro-batch counts: every figure of the results
// (peaks, breakdowns, per-phase peaks, segments) must be the same, and
// the jump must happen where the state repeats.
func TestSteadyStateExact(t *testing.T) {
	if testing.Short() {
		t.Skip("replays dozens of pipelines")
	}
	type tc struct {
		pp, seq, tp int64
		ckpt        string
		ms          []int64
	}
	jumped := 0
	for _, c := range []tc{
		{2, 2048, 1, "none", []int64{2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 33}},
		{4, 1024, 1, "every-block", []int64{4, 5, 8, 13, 16, 32}},
		{2, 256, 1, "none", []int64{24, 40}},
		{2, 2048, 2, "none", []int64{8, 20}},
	} {
		for _, m := range c.ms {
			for st := int64(0); st < c.pp; st++ {
				t.Run(fmt.Sprintf("pp%d-tp%d-s%d-m%d-stage%d-%s", c.pp, c.tp, c.seq, m, st, c.ckpt), func(t *testing.T) {
					o := model.Overrides{PP: c.pp, PPSchedule: model.PP1F1B, GradAccum: m, Checkpointing: c.ckpt,
						TP: c.tp, SP: c.tp > 1, Seq: c.seq, Batch: 1, Precision: "amp-bf16", Optimizer: "adamw-foreach"}
					spec := load(t, "tinyllama-1.1b.yaml", o)
					before := steadyJumps.Load()
					full, fast := replayBoth(t, spec, st)
					n := steadyJumps.Load() - before
					if full != fast {
						t.Errorf("the replay with %d jumps differs from the full replay:\n%s\n%s", n, fast, full)
					}
					if n > 0 {
						jumped++
					}
				})
			}
		}
	}
	t.Logf("%d replays jumped", jumped)
	if jumped == 0 {
		t.Errorf("no replay jumped: the steady state was never detected")
	}
}

// TestSteadyStateExactModels repeats the comparison on other models and
// settings: grouped-query Llama-3-8B with checkpointing, Qwen2.5-7B's
// biased projections, Mistral-7B, eager attention, a micro-batch of two.
func TestSteadyStateExactModels(t *testing.T) {
	if testing.Short() {
		t.Skip("replays dozens of pipelines")
	}
	for _, x := range []struct {
		spec          string
		pp, m, seq, b int64
		ckpt, attn    string
	}{
		{"llama-3-8b.yaml", 4, 40, 2048, 1, "every-block", ""},
		{"mistral-7b.yaml", 2, 30, 1024, 1, "none", ""},
		{"qwen2.5-7b.yaml", 3, 30, 1024, 1, "none", ""},
		{"tinyllama-1.1b.yaml", 2, 48, 1024, 2, "none", "eager"},
		{"tinyllama-1.1b.yaml", 3, 48, 1024, 2, "every-block", ""},
	} {
		for st := int64(0); st < x.pp; st++ {
			t.Run(fmt.Sprintf("%s-pp%d-stage%d", x.spec, x.pp, st), func(t *testing.T) {
				o := model.Overrides{PP: x.pp, PPSchedule: model.PP1F1B, GradAccum: x.m, Checkpointing: x.ckpt,
					Seq: x.seq, Batch: x.b, Precision: "amp-bf16", Attention: x.attn}
				spec := load(t, x.spec, o)
				if full, fast := replayBoth(t, spec, st); full != fast {
					t.Errorf("the replay with jumps differs from the full replay:\n%s\n%s", fast, full)
				}
			})
		}
	}
}

// TestSteadyStateExactFSDP repeats the comparison with FSDP over the
// pipeline's data-parallel ranks (its all-gathers and reduce-scatters on
// side streams): ZeRO 2 and 3, FSDP's bf16 policy, tensor and expert
// parallelism beside it, a mixture of experts, and context parallelism.
func TestSteadyStateExactFSDP(t *testing.T) {
	if testing.Short() {
		t.Skip("replays dozens of pipelines")
	}
	jumped := 0
	for _, x := range []struct {
		spec                  string
		hf                    bool
		pp, m, dp, tp, ep, cp int64
		zero, ckpt, prec      string
	}{
		{"tinyllama-1.1b.yaml", false, 2, 24, 2, 1, 1, 1, "3", "none", "amp-bf16"},
		{"tinyllama-1.1b.yaml", false, 2, 24, 2, 1, 1, 1, "2", "every-block", "amp-bf16"},
		{"tinyllama-1.1b.yaml", false, 4, 17, 4, 1, 1, 1, "3", "every-block", "fsdp-bf16"},
		{"tinyllama-1.1b.yaml", false, 2, 20, 2, 2, 1, 1, "3", "none", "bf16"},
		{"tinyllama-1.1b.yaml", false, 2, 16, 2, 1, 1, 2, "3", "every-block", "amp-bf16"},
		{"llama-3-8b.yaml", false, 4, 32, 2, 1, 1, 1, "2", "every-block", "bf16"},
		{"../model/testdata/hf/tiny-qwen3-moe.json", true, 2, 16, 4, 1, 2, 1, "3", "every-block", "amp-bf16"},
		{"../model/testdata/hf/tiny-qwen3-moe.json", true, 2, 16, 2, 2, 4, 1, "2", "none", "bf16"},
	} {
		for st := int64(0); st < x.pp; st++ {
			t.Run(fmt.Sprintf("%s-pp%d-dp%d-tp%d-ep%d-cp%d-zero%s-stage%d", x.spec, x.pp, x.dp, x.tp, x.ep, x.cp, x.zero, st), func(t *testing.T) {
				o := model.Overrides{PP: x.pp, PPSchedule: model.PP1F1B, GradAccum: x.m, Checkpointing: x.ckpt,
					DP: x.dp, Zero: x.zero, TP: x.tp, SP: x.tp > 1, EP: x.ep, CP: x.cp, LossParallel: x.tp > 1,
					Seq: 1024, Batch: 1, Precision: x.prec}
				var spec *model.Spec
				var err error
				if x.hf {
					spec, err = model.LoadHF(x.spec, o)
				} else {
					spec = load(t, x.spec, o)
				}
				if err != nil {
					t.Fatal(err)
				}
				before := steadyJumps.Load()
				full, fast := replayBoth(t, spec, st)
				if full != fast {
					t.Errorf("the replay with jumps differs from the full replay:\n%s\n%s", fast, full)
				}
				if n := steadyJumps.Load() - before; n > 0 {
					jumped++
					t.Logf("%d jumps", n)
				}
			})
		}
	}
	t.Logf("%d replays jumped", jumped)
	if jumped == 0 {
		t.Errorf("no replay jumped: the steady state was never detected under FSDP")
	}
}

// replayBoth simulates stage st of spec with and without the jumps and
// returns both results (with the allocator's segments) as JSON.
func replayBoth(t *testing.T, spec *model.Spec, st int64) (full, fast string) {
	t.Helper()
	run := func(skip bool) string {
		steadySkip = skip
		defer func() { steadySkip = true }()
		p, err := newPipeline(spec, st)
		if err != nil {
			t.Fatal(err)
		}
		var segs []int64
		r, err := simulateRank(spec, func(s *sim) { segs = s.al.Segments() }, func(s *sim) { s.pp = p })
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(struct {
			R *Result
			S []int64
		}{r, segs})
		return string(b)
	}
	return run(false), run(true)
}

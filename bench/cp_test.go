package bench

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestContextParallelAccuracy holds memplan's predictions for the
// context-parallel runs of bench/torch/dist/cp.py on two H200s
// (context_parallel with load balancing, ring attention, AdamW foreach,
// amp-bf16) to issue 13's worst-case targets: peak allocated within 6%,
// reserved and device within 8%, nothing more than UnderLimit under. Five
// runs are tuning data (the line of the 2026-11-23 -heldout file,
// Llama-3.2-1B at s = 16384, was measured before its prediction was
// committed, docs/parallelism.md §3.3); the four of
// bench/torch/dist/cp-heldout.txt were measured on 2026-11-26 after theirs
// were, with one line over four GPUs (grid-4-layouts.txt, tuning) and two
// more held out (heldout-4-layouts.txt). The fourteenth session added, on
// four H200s, context parallelism with tensor parallelism and FSDP over
// dp·cp: eight tuning lines (grid-cp-tp.txt) and two held-out sets of
// three (heldout-cp-tp.txt, heldout-cp-tp-2.txt), predicted first. The
// sixteenth added, on four H100s, expert parallelism with context
// parallelism and FSDP over dp·cp on a small mixture of experts (cp.py
// --ep: grid-cp-ep.txt, five tuning lines, and heldout-cp-ep.txt, two,
// all predicted first). The twenty-sixth added two held-out lines under
// FSDP2 on two GPUs (heldout-26-x2.txt, with the root kept unsharded). The
// twenty-ninth added the transformers-run families alone
// (grid-cp-families.txt); the thirtieth, on four H200s, the same families
// under FSDP2 over dp·cp (grid-cp-families-fsdp.txt, six lines, and
// heldout-cp-families-fsdp.txt, two, predicted first), held-out set
// 30's two lines (heldout-30.txt) and, after FSDP2's per-parameter
// storages were simulated under context parallelism, held-out set 30b's
// six two-GPU lines on two H200s (heldout-30b-cp.txt and
// heldout-30b-cp-x2.txt), then on four H200s the same families with
// tensor parallelism inside the cp ranks (grid-cp-tp-families.txt, four
// lines, heldout-cp-tp-families.txt, two, one traced:
// trace-cp-tp-families.txt) and, after the padded vocabulary shard,
// held-out set 30d (heldout-30d-cp-tp-fsdp.txt), held-out set 50's
// context-parallel line (heldout-50.txt) and set 60's, over four ranks
// under FSDP2 (heldout-60.txt). The forty-fourth measured, one rank at a
// time on one H200 over a fake process group, replicas of three of those
// runs (fake-check-cp.txt) and held-out set 82 at cp 8 and at cp 8 × tp 2
// and cp 4 × tp 4 (heldout-82.txt), then set 84's transformers configs
// (heldout-84.txt) and set 85 at cp 4, 8 and 16 (heldout-85.txt); the
// forty-fifth traced set 85's TinyLlama line again (trace-86.txt), ran it
// once more after cp.py's fix (rerun-45.txt) and measured held-out set 87,
// specs at cp 4, 8 and 16 (heldout-87.txt). The
// listed gaps
// (contextGaps) may be under, and only by the metrics named; the listed overs (contextOver) may be over
// the worst-case targets.
func TestContextParallelAccuracy(t *testing.T) {
	n := 0
	for _, file := range []string{"2026-11-23-h200x2-tp.jsonl", "2026-11-23-h200x2-tp-heldout.jsonl", "2026-11-26-h200x4-cp-heldout.jsonl",
		"2026-11-26-h200x4-layouts.jsonl", "2026-11-26-h200x4-layouts-heldout.jsonl",
		"2026-11-26-h200x4-cp-tp.jsonl", "2026-11-26-h200x4-cp-tp-heldout.jsonl", "2026-11-26-h200x4-cp-tp-heldout-2.jsonl",
		"2026-11-27-cp-ep-h100x4.jsonl", "2026-11-27-cp-ep-heldout-h100x4.jsonl",
		"2026-11-27-h200x4-tp-hf/x2-heldout.jsonl",
		"2026-11-28-h100x4-cp-families/cp-families.jsonl", "2026-11-28-h100x4-cp-families/cp-families-heldout.jsonl",
		"2026-11-28-h200x2-heldout-30/heldout-30.jsonl",
		"2026-11-28-h200x4-cp-families-fsdp/cp-families-fsdp.jsonl", "2026-11-28-h200x4-cp-families-fsdp/cp-families-fsdp-heldout.jsonl",
		"2026-11-28-h200x2-heldout-30b-cp/heldout-30b-cp.jsonl", "2026-11-28-h200x2-rope-fp32/rope.jsonl",
		"2026-11-28-h200x4-cp-tp-families/cp-tp.jsonl", "2026-11-28-h200x4-cp-tp-families/cp-tp-heldout.jsonl",
		"2026-11-28-h200x4-cp-tp-families-trace/trace.jsonl", "2026-11-28-h200x4-heldout-30d/heldout-30d.jsonl",
		"2026-11-28-h200x2-heldout-50/heldout-50.jsonl", "2026-11-28-h200x2-heldout-58/heldout-58.jsonl",
		"2026-11-28-h200x4-heldout-60/layouts.jsonl", "2026-11-28-h200x4-heldout-64/heldout-64.jsonl",
		"2026-11-28-h200x4-pp64-history/rope-2.jsonl", "2026-11-28-h200x2-heldout-67/heldout-67.jsonl",
		"2026-11-28-h200x4-heldout-68/heldout-68.jsonl", "2026-11-29-h200x2-heldout-75/heldout-75.jsonl",
		"2026-11-29-h200-fake-tp-81/fake-check-cp.jsonl", "2026-11-29-h200-fake-tp-81/heldout-82.jsonl",
		"2026-11-29-h200-fake-tp-81/heldout-84.jsonl", "2026-11-29-h200-fake-tp-81/heldout-85.jsonl",
		"2026-11-29-h200-fake-45/trace-86.jsonl", "2026-11-29-h200-fake-45/heldout-87.jsonl",
		"2026-11-29-h200-fake-45/rerun-45.jsonl"} {
		for _, r := range readScript(t, filepath.Join("results", file), "cp") {
			n++
			t.Run(r.Label, func(t *testing.T) { checkCP(t, r) })
		}
	}
	if n != 114 {
		t.Fatalf("%d context-parallel runs, want 114", n)
	}
}

// checkCP predicts one cp.py run with the command line cp.py prints and
// compares it with the busiest rank.
func checkCP(t *testing.T, r tpRecord) {
	c := r.Config
	o := model.Overrides{Batch: c.Batch, Seq: c.Seq, Precision: model.AMPBF16, Optimizer: model.AdamW,
		Checkpointing: c.Checkpointing, CP: c.CP, TP: c.TP, SP: c.SP, LossParallel: c.LossParallel, Dev: r.dev(),
		GradAccum: c.GradAccum, LossOutsideAutocast: true} // cp.py's loss is outside autocast
	if c.FSDP || c.TP > 1 {
		// cp.py builds the model whole on the GPU before parallelize_module
		// (tp) and fully_shard over dp·cp (--fsdp), and leaves the cache
		// as the wrapping left it (no empty_cache: EmptyCacheAfterWrap
		// false).
		o.FSDPInit = model.FSDPInitGPU
	}
	if c.Meta {
		// A transformers config is sharded on the meta device, then
		// materialised (cp.py's main_hf).
		o.FSDPInit = model.FSDPInitMeta
	}
	if c.FSDP {
		// fully_shard(model) without reshard_after_forward: torch keeps
		// the root unsharded after the forward.
		o.Zero, o.FSDPRoot = "3", model.FSDPRootKeep
		if c.DP > 1 {
			o.DP = c.DP
		}
	}
	setEP(&o, c.EP, c.Router, c.RecvRowsMax) // cp.py --ep: the experts over dp·cp
	e := distErrors(t, r, o)
	limit := distTargets.Worst
	if why, ok := contextOver[r.Label]; ok {
		if e[Allocated] <= limit[Allocated] && e[Reserved] <= limit[Reserved] {
			t.Errorf("listed as over (%s) but within the worst-case targets: %+.1f%% allocated, %+.1f%% reserved", why, 100*e[Allocated], 100*e[Reserved])
		}
		limit = [NumMetrics]float64{math.Inf(1), math.Inf(1), math.Inf(1)}
	}
	gap := contextGaps[r.Label]
	under := false
	for k, e := range e {
		under = under || e < -UnderLimit
		if (e < -UnderLimit && !gap[k]) || abs(e) > limit[k] {
			t.Errorf("%s %+.1f%% (limit %.0f%%, %.0f%% under)", MetricNames[k], 100*e, 100*limit[k], 100*UnderLimit)
		}
		t.Logf("%s %+.2f%%", MetricNames[k], 100*e)
	}
	if gap != nil && !under {
		t.Errorf("listed as a gap but no longer more than %.0f%% under", 100*UnderLimit)
	}
}

// contextOver are the context-parallel runs over issue 13's worst-case
// targets (on the safe side), with why; they must still be no more than
// UnderLimit under, and a listed run within the targets fails the test.
// None since the thirtieth session, which simulates FSDP2's per-parameter
// storages under context parallelism too (sharding.go): the two
// mixture-of-experts lines listed before (+9.3% allocated, +9.2% reserved,
// two blocks' gathered parameters held for the whole pass) are within
// 1.8%.
var contextOver = map[string]string{}

// contextGaps are the context-parallel runs more than UnderLimit under,
// with the metrics that are.
//
// (Two, both FSDP over dp·cp with expert parallelism on
// bench/torch/dist/moe-llama.yaml, −3.9% and −3.2% reserved from the
// thirtieth session to the forty-second, the same with the harness's
// rotary tables in fp32, are −0.2% and −0.5% since the forty-third: cp.py
// builds the model on the GPU and wraps it without emptying the cache
// after, where memplan's wrapping had always emptied it, as train.py and
// measure.py do. The first's history (every rank,
// bench/results/2026-11-27-h200x4-cp-ep-trace-2) replays through memplan's
// allocator to the 11,578 MiB the run reserved; memplan's own requests,
// without the empty_cache their trace had, to 11,558 MiB, its estimate
// since model.Training.EmptyCacheAfterWrap (docs/multigpu.md, "Wrapping a
// model built on the host").)
//
// Granite at cp 2 × tp 2 under FSDP2 over cp (held out, thirtieth session;
// −1.7 / −5.3 / −4.7% blind): its history (every rank,
// bench/results/2026-11-28-h200x4-cp-tp-families-trace) showed the last tp
// rank padding its smaller vocabulary shard (49,155 rows over two) for the
// logits' all-gather, a 384 MiB copy memplan had left out
// (model.VocabHead.Uneven since): −0.2 / −3.5 / −3.0%. Ranks 1 and 3 run
// that same program and reserved 20,456 and 19,814 MiB (3.2% apart; ranks
// 0 and 2, the other same program, 19,300 and 19,380); the histories of
// ranks 0 and 1 replay exactly through memplan's allocator. memplan's
// 19,750 is near rank 3's.
var contextGaps = map[string]map[int]bool{
	"cp.py 4 model/testdata/hf/granite-3.1-2b.json --tp 2 --fsdp --seq 16384 --batch 1 --checkpointing every-block": {Reserved: true, Device: true},
}

package bench

import (
	"path/filepath"
	"testing"

	"github.com/memplan/memplan/model"
)

// pipelineGaps are the pipeline runs more than UnderLimit under, with what
// is known of them (docs/parallelism.md §3.2.4): peak allocated is exact
// and reserved memory grows in later steps by segments the two simulated
// steps do not map. A listed run that is no longer under fails the test,
// so the list stays true.
var pipelineGaps = map[string][]int{
	// GPipe, 8 micro-batches: the last stage's reserve still grows in the
	// third step (32.41 GiB after two, 33.63 after three).
	"pp.py 2 specs/tinyllama-1.1b.yaml --schedule gpipe --microbatches 8 --seq 2048 --batch 1": {Reserved, Device},
}

// TestPipelineAccuracy holds memplan's predictions for every pipeline run
// of bench/torch/dist/pp.py (torch.distributed.pipelining; GPipe, 1F1B and
// the interleaved schedule on two H200s; tensor parallelism inside the
// stages on a pp × tp mesh of four; four stages on four) to issue 13's
// targets against the
// busiest rank: medians within 2% (allocated) and 3% (reserved, device),
// worst within 6% and 8%, nothing more than UnderLimit under except the
// listed gaps. The held-out lines (predictions committed before they were
// measured) are among them; docs/parallelism.md reports them apart.
func TestPipelineAccuracy(t *testing.T) {
	files := []string{
		"2026-11-23-h200x2-tp.jsonl", "2026-11-23-h200x2-tp-heldout.jsonl",
		"2026-11-26-h200x4-pp-interleaved.jsonl", "2026-11-26-h200x4-pp-interleaved-heldout.jsonl",
		"2026-11-26-h200x4-pp-tp.jsonl", "2026-11-26-h200x4-pp-tp-heldout.jsonl",
		"2026-11-26-h200x4-layouts.jsonl", "2026-11-26-h200x4-layouts-heldout.jsonl",
	}
	var errs [NumMetrics][]float64
	under := map[string]bool{}
	for _, f := range files {
		for _, r := range readScript(t, filepath.Join("results", f), "pp") {
			c := r.Config
			o := model.Overrides{Batch: c.Batch, Seq: c.Seq, Precision: model.AMPBF16, Optimizer: model.AdamW + "-" + model.ImplForeach,
				Checkpointing: c.Checkpointing, PP: c.PP, PPSchedule: c.Schedule, GradAccum: c.Microbatches,
				TP: c.TP, SP: c.SP, Dev: "h200-141gb"}
			if c.Schedule == "interleaved" {
				o.PPVirtual = c.Virtual
			}
			e := distErrors(t, r, o)
			for k := 0; k < NumMetrics; k++ {
				errs[k] = append(errs[k], e[k])
				known := false
				for _, m := range pipelineGaps[r.Label] {
					known = known || m == k
				}
				if e[k] < -UnderLimit && !known {
					t.Errorf("%s: %s %+.1f%%", r.Label, MetricNames[k], 100*e[k])
				}
				if e[k] < -UnderLimit {
					under[r.Label] = true
				}
			}
		}
	}
	for label := range pipelineGaps {
		if !under[label] {
			t.Errorf("%s is listed as a gap but is no longer more than %.0f%% under", label, 100*UnderLimit)
		}
	}
	if n := len(errs[Allocated]); n != 25 {
		t.Fatalf("%d pipeline runs, want 25", n)
	}
	checkSpread(t, errs)
}

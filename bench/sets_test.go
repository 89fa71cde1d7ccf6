package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// singleGPUTuning is every committed set of single-GPU training runs on the
// H100 (and, from the eighteenth session, the H200) used in tuning
// (docs/accuracy.md lists them with the command that compares them); the
// held-out sets are every results/*h100*heldout*.jsonl and
// results/*-h200-heldout*.jsonl (singleGPUHeldOut).
// Workspace probes, parameter counts, diagnose and max-batch runs are not
// training runs and are left out.
var singleGPUTuning = []string{
	"results/2026-11-22-h100.jsonl",
	"results/2026-11-22-h100-convws.jsonl",
	"results/2026-11-22-h100-hf.jsonl",
	"results/2026-11-22-h100-zero.jsonl",
	"results/2026-11-23-h100-allocconf.jsonl",
	"results/2026-11-23-h100-convws-1d.jsonl",
	"results/2026-11-23-h100-lora.jsonl",
	"results/2026-11-23-h100-newkinds.jsonl",
	"results/2026-11-23-h100-traces2/runs.jsonl",
	"results/2026-11-23-h100-zero-emptycache.jsonl",
	"results/2026-11-27-h200-large.jsonl",
	"results/2026-11-27-h200-sliding.jsonl",
	"results/2026-11-27-sliding-traces/runs.jsonl",
	"results/2026-11-27-h100-olmo2.jsonl",
	"results/2026-11-27-h100-granite.jsonl",
	"results/2026-11-27-h100-lora-new.jsonl",
	"results/2026-11-27-h200-olmo3.jsonl",
	"results/2026-11-27-h200-olmo3-traces/runs.jsonl",
	"results/2026-11-27-h100-olmo.jsonl",
	"results/2026-11-27-h200-eagercopy.jsonl",
	"results/2026-11-27-h200-smollm3.jsonl",
	"results/2026-11-27-h200-starcoder2.jsonl",
	"results/2026-11-27-h200-lora-22.jsonl",
	"results/2026-11-27-h200-phi.jsonl",
	"results/2026-11-27-h200-lora-phi.jsonl",
	"results/2026-11-27-h200-cohere.jsonl",
	"results/2026-11-27-h200-lora-cohere.jsonl",
	"results/2026-11-27-h200-gptoss.jsonl",
	"results/2026-11-27-h200-lora-gptoss.jsonl",
	"results/2026-11-27-h200-deepseek.jsonl",
	"results/2026-11-27-h200-deepseek-v2.jsonl",
	"results/2026-11-27-h200-lora-deepseek.jsonl",
	"results/2026-11-27-h200-glm.jsonl",
	"results/2026-11-27-h200-phi3.jsonl",
	"results/2026-11-27-h200x2-phi3-traces/runs.jsonl",
	"results/2026-11-27-h200-lora-phi3.jsonl",
	"results/2026-11-28-h200-llama4.jsonl",
	"results/2026-11-28-h200-llama4-lora.jsonl",
	// Llama 4's test shape at 1 × 4,096, checkpointed, two steps: the
	// single-GPU side of the thirty-sixth session's stack-traced run.
	"results/2026-11-28-h200x2-pp-stacks/single.jsonl",
	// FSDP2 through the fake process group with the model loaded in bf16
	// and its shards cast to fp32 after wrapping, as accelerate's
	// fsdp2_prepare_model does under mixed precision (measure.py
	// --load-dtype bf16, forty-third session): memplan does not simulate
	// the cast, and is within 0.2% of all three (docs/multigpu.md).
	"results/2026-11-29-h200-upcast-traces/upcast.jsonl",
	// The same through accelerate's cpu_ram_efficient_loading (sharded on
	// the meta device, each full parameter then moved to the GPU and
	// scattered by accelerate 1.15's fsdp2_load_full_state_dict;
	// measure.py --ram-efficient): memplan's host wrapping, which it does
	// not follow, is within 0.3% (over) of all four (docs/multigpu.md).
	"results/2026-11-29-h200-ram-efficient/ram.jsonl",
}

// singleGPUHeldOut returns the committed held-out single-GPU sets: the
// H100's and, from the eighteenth session, the H200's (the H200's
// multi-GPU sets are named h200x2-, h200x4- and do not match).
func singleGPUHeldOut() ([]string, error) {
	var all []string
	for _, g := range []string{"results/*h100*heldout*.jsonl", "results/*-h200-heldout*.jsonl"} {
		m, err := filepath.Glob(g)
		if err != nil {
			return nil, err
		}
		all = append(all, m...)
	}
	return all, nil
}

// setGaps are the runs of the committed single-GPU sets that miss issue 14's
// targets for the default setting (reserved within 10%, nothing more than
// UnderLimit under), with the metrics that miss and what is known of each
// (docs/accuracy.md). knownGaps, the tuning gaps of TestAccuracyTargets,
// count here too.
var setGaps = []struct {
	match   string
	metrics []int
	why     string
}{
	// None since the thirty-fifth session: ViT-B/16's checkpointed bf16
	// line at a batch of 64 (held-out set 51, −5.0% blind: PyTorch's cache
	// grew in the run's third step) is exact since steps are simulated
	// until one ends as the one before (estimate's train; docs/allocator.md
	// §8, "Steps until the cache repeats").
}

// setGap reports whether the run labelled label is a listed gap for metric
// m: its label is the gap's, exactly (a longer label, such as the same
// run under an allocator setting, is another run).
func setGap(label string, m int) bool {
	label = strings.TrimSpace(label)
	for _, g := range setGaps {
		if label == g.match && contains(g.metrics, m) {
			return true
		}
	}
	for _, g := range knownGaps {
		if label == g.match && contains(g.metrics, m) {
			return true
		}
	}
	return false
}

func contains(ms []int, m int) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

// TestEverySingleGPUSet holds every committed single-GPU set to issue 14's
// targets for the default setting and the medians of Targets: a run that
// misses is listed in setGaps or knownGaps with its cause, and a listed
// gap that meets the targets again must leave the list.
func TestEverySingleGPUSet(t *testing.T) {
	held, err := singleGPUHeldOut()
	if err != nil || len(held) < 8 {
		t.Fatalf("held-out sets %v (%v), want at least 8", held, err)
	}
	rep, err := Compare("..", singleGPUTuning, held)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tuning.N < 100 || rep.HeldOut.N < rep.All.N/5 {
		t.Fatalf("%d tuning and %d held-out runs; want ≥ 100 and a fifth held out", rep.Tuning.N, rep.HeldOut.N)
	}
	checkMedians(t, rep)
	// The figures README.md and docs/accuracy.md's summary quote
	// (go test ./bench -run TestEverySingleGPUSet -v prints them).
	for _, s := range []struct {
		name string
		sum  Summary
	}{{"tuning", rep.Tuning}, {"held out", rep.HeldOut}, {"all", rep.All}} {
		for m := 0; m < NumMetrics; m++ {
			t.Logf("%s (%d runs): %s median %.1f%%, worst %.1f%%, %d more than %.0f%% under", s.name, s.sum.N,
				MetricNames[m], 100*s.sum.Median[m], 100*s.sum.Worst[m], s.sum.Under[m], 100*UnderLimit)
		}
	}
	// A listed gap must still miss in at least one run of its label (one
	// configuration can be in several sets).
	matched, missed := map[string]bool{}, map[gapKey]bool{}
	for _, r := range rep.Rows {
		label := strings.TrimSpace(r.Label)
		if os.Getenv("MEMPLAN_BENCH_LOG") != "" {
			// One line per run, to set two trees' figures side by side
			// (as distErrors logs the multi-GPU runs).
			t.Logf("run %s: %+.2f%% %+.2f%% %+.2f%%", label, 100*r.Err[0], 100*r.Err[1], 100*r.Err[2])
		}
		for m := 0; m < NumMetrics; m++ {
			e := r.Err[m]
			miss := e < -UnderLimit || abs(e) > Targets.Worst[m]
			switch {
			case setGap(r.Label, m):
				matched[label] = true
				missed[gapKey{label, m}] = missed[gapKey{label, m}] || miss
			case miss:
				t.Errorf("%s: %s %+.1f%% (worst %.0f%%, under limit %.0f%%)", r.Label, MetricNames[m], 100*e, 100*Targets.Worst[m], 100*UnderLimit)
			}
		}
	}
	for _, g := range append(setGaps[:len(setGaps):len(setGaps)], knownGaps...) {
		for _, m := range g.metrics {
			if matched[g.match] && !missed[gapKey{g.match, m}] {
				t.Errorf("%s: %s meets the targets in every run: no longer a gap", g.match, MetricNames[m])
			}
		}
	}
	for _, g := range setGaps {
		if !matched[g.match] {
			t.Errorf("gap %q matches no run", g.match)
		}
	}
}

// checkMedians holds the tuning and held-out medians of rep to Targets.
func checkMedians(t *testing.T, rep *Report) {
	t.Helper()
	for name, s := range map[string]Summary{"tuning": rep.Tuning, "held-out": rep.HeldOut} {
		for m := 0; m < NumMetrics; m++ {
			if s.Median[m] > Targets.Median[m] {
				t.Errorf("%s: %s median error %.2f%%, target %.0f%%", name, MetricNames[m], 100*s.Median[m], 100*Targets.Median[m])
			}
		}
	}
}

// settingWorst is issue 14's target for runs under an allocator setting
// (--alloc-conf, PYTORCH_ALLOC_CONF): peak reserved and device total
// within 3% on every run, none more than UnderLimit under.
const settingWorst = 0.03

// TestAllocatorSettings holds every committed run under an allocator
// setting to settingWorst: the single-GPU ones of every tuning and
// held-out set (expandable_segments, roundup_power2_divisions,
// max_split_size_mb, garbage_collection_threshold, alone and combined, on
// decoders with and without checkpointing, CNNs, a mixture of experts) and
// the FSDP2 ones on two and four H200s (docs/accuracy.md). With -v it
// prints the worst of each group.
func TestAllocatorSettings(t *testing.T) {
	held, err := singleGPUHeldOut()
	if err != nil {
		t.Fatal(err)
	}
	single, err := Compare("..", singleGPUTuning, held)
	if err != nil {
		t.Fatal(err)
	}
	fsdp, err := Compare("..", []string{"results/2026-11-23-h200x2-allocconf.jsonl"},
		[]string{"results/2026-11-26-h200x4-allocconf-heldout2.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name string
		rep  *Report
		min  int
	}{{"single GPU", single, 30}, {"FSDP2", fsdp, 9}} {
		var n, held int
		var worst [NumMetrics]float64
		for _, r := range g.rep.Rows {
			if !strings.Contains(r.Label, "--alloc-conf") {
				continue
			}
			n++
			if r.HeldOut {
				held++
			}
			for _, m := range []int{Reserved, Device} {
				e := r.Err[m]
				worst[m] = max(worst[m], abs(e))
				if abs(e) > settingWorst || e < -UnderLimit {
					t.Errorf("%s: %s %+.1f%% (issue 14: within %.0f%%)", r.Label, MetricNames[m], 100*e, 100*settingWorst)
				}
			}
		}
		if n < g.min || held == 0 {
			t.Errorf("%s: %d runs under a setting (%d held out), want at least %d and some held out", g.name, n, held, g.min)
		}
		t.Logf("%s: %d runs under a setting, %d held out; worst reserved %.1f%%, device %.1f%%",
			g.name, n, held, 100*worst[Reserved], 100*worst[Device])
	}
}

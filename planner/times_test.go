package planner

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/memplan/memplan/model"
)

// timedOracle is Simulator, timing each estimate.
type timedOracle struct {
	Simulator
	log *[]timedEstimate
}

type timedEstimate struct {
	l       Layout
	d       time.Duration
	stopped bool
	total   int64
}

func (o timedOracle) Estimate(spec *model.Spec, l Layout) (Busiest, error) {
	return o.EstimateAbove(spec, l, 0)
}

func (o timedOracle) EstimateAbove(spec *model.Spec, l Layout, above int64) (Busiest, error) {
	t0 := time.Now()
	b, err := o.Simulator.EstimateAbove(spec, l, above)
	*o.log = append(*o.log, timedEstimate{l, time.Since(t0), b.Stopped, b.DeviceTotal})
	return b, err
}

// TestPlanEstimateTimes logs what each estimate of BenchmarkPlan70B's
// amp-bf16 plan costs, the dearest first, with MEMPLAN_PLAN_TIMES=1
// (MEMPLAN_PLAN_PRECISION=bf16 for the bf16 plan's)
// (docs/performance.md, twelfth session; bench/results/
// 2026-11-26-devvm-speed-12th/run.sh runs it at GOMAXPROCS=1).
func TestPlanEstimateTimes(t *testing.T) {
	if os.Getenv("MEMPLAN_PLAN_TIMES") == "" {
		t.Skip("set MEMPLAN_PLAN_TIMES=1")
	}
	spec := load(t, "llama-3-70b.yaml")
	if p := os.Getenv("MEMPLAN_PLAN_PRECISION"); p != "" {
		spec.Training.Precision = p // bf16: BenchmarkPlan70B/simulator-bf16's plan
	}
	var log []timedEstimate
	t0 := time.Now()
	r, err := Plan(spec, Request{GlobalBatch: 1024, MaxGPUs: 1024}, timedOracle{log: &log})
	if err != nil && !errors.Is(err, ErrNoLayout) {
		t.Fatal(err)
	}
	t.Logf("plan %v, %d estimates, limit %.2f GiB", time.Since(t0), r.Stats.OracleCalls, float64(r.Limit)/(1<<30))
	logOutcomes(t, log, r.Limit, true)
}

// TestPlanEstimateKinds logs, with MEMPLAN_PLAN_KINDS=1, what the
// Qwen3-30B-A3B request of docs/moe.md §6 (seq 4096, global batch 64, up to
// 16 GPUs on an H100) estimates: how many estimates on each number of
// GPUs, and per kind of layout (tensor, expert and pipeline parallelism)
// their count and time, and its estimates by outcome (MEMPLAN_PLAN_KINDS=each
// lists every one; docs/performance.md, seventeenth session;
// bench/results/2026-11-27-devvm-speed-17th/run-d.sh runs it at
// GOMAXPROCS=1).
func TestPlanEstimateKinds(t *testing.T) {
	if os.Getenv("MEMPLAN_PLAN_KINDS") == "" {
		t.Skip("set MEMPLAN_PLAN_KINDS=1")
	}
	spec, err := model.LoadHF("../model/testdata/hf/qwen3-30b-a3b.json", model.Overrides{Seq: 4096, Dev: "h100-80gb"})
	if err != nil {
		t.Fatal(err)
	}
	var log []timedEstimate
	t0 := time.Now()
	r, err := Plan(spec, Request{GlobalBatch: 64, MaxGPUs: 16}, timedOracle{log: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan %v, %d estimates, first %s", time.Since(t0), r.Stats.OracleCalls, r.Layouts[0].Name)
	gpus := map[int64]int{}
	type tally struct {
		n int
		d time.Duration
	}
	kinds := map[string]*tally{}
	for _, x := range log {
		gpus[x.l.GPUs()]++
		k := fmt.Sprintf("%d GPUs", x.l.GPUs())
		for _, p := range []struct {
			on   bool
			name string
		}{{x.l.TP > 1, " tp"}, {x.l.EP > 1, " ep"}, {x.l.PP > 1, " pp"}, {x.l.CP > 1, " cp"}} {
			if p.on {
				k += p.name
			}
		}
		if kinds[k] == nil {
			kinds[k] = &tally{}
		}
		kinds[k].n++
		kinds[k].d += x.d
	}
	t.Logf("estimates by GPUs: %v", gpus)
	logOutcomes(t, log, r.Limit, os.Getenv("MEMPLAN_PLAN_KINDS") == "each")
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return kinds[names[i]].d > kinds[names[j]].d })
	for _, k := range names {
		t.Logf("%-22s %4d estimates  %v", k, kinds[k].n, kinds[k].d.Round(time.Millisecond))
	}
}

// logOutcomes logs the estimates of a plan by outcome (a layout that fits,
// one over the limit estimated whole, one whose estimate stopped), and
// with each set, every estimate, the dearest first.
func logOutcomes(t *testing.T, log []timedEstimate, limit int64, each bool) {
	var n [3]int
	var d [3]time.Duration
	for _, x := range log {
		k := 0
		switch {
		case x.stopped:
			k = 2
		case x.total > limit:
			k = 1
		}
		n[k]++
		d[k] += x.d
	}
	t.Logf("fit: %d estimates, %v; over, whole: %d, %v; stopped: %d, %v", n[0], d[0], n[1], d[1], n[2], d[2])
	if !each {
		return
	}
	log = slices.Clone(log)
	sort.Slice(log, func(i, j int) bool { return log[i].d > log[j].d })
	for _, x := range log {
		stopped := ""
		if x.stopped {
			stopped = " (stopped)"
		}
		t.Logf("%8.1f ms  %6.2f GiB  %s%s", float64(x.d.Microseconds())/1000, float64(x.total)/(1<<30), x.l, stopped)
	}
}

// TestPlanTops logs, with MEMPLAN_PLAN_TOPS=1, how long BenchmarkPlan70B's
// amp-bf16 plan takes for the first layout, the first three and the ten
// memplan plan lists (docs/performance.md, eighteenth session;
// bench/results/2026-11-27-devvm-speed-18th/run-d.sh runs it at
// GOMAXPROCS=1).
func TestPlanTops(t *testing.T) {
	if os.Getenv("MEMPLAN_PLAN_TOPS") == "" {
		t.Skip("set MEMPLAN_PLAN_TOPS=1")
	}
	spec := load(t, "llama-3-70b.yaml")
	for _, top := range []int{1, 3, 10} {
		t0 := time.Now()
		r, err := Plan(spec, Request{GlobalBatch: 1024, MaxGPUs: 1024, Top: top}, Simulator{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("top %2d: %v, %d estimates, first %s on %d GPUs", top, time.Since(t0).Round(time.Millisecond),
			r.Stats.OracleCalls, r.Layouts[0].Name, r.Layouts[0].GPUs)
	}
}

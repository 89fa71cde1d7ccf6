package planner

import (
	"errors"
	"os"
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
	// By outcome: a layout that fits, one over the limit estimated whole
	// (within the stop level), one whose estimate stopped.
	var n [3]int
	var d [3]time.Duration
	for _, x := range log {
		k := 0
		switch {
		case x.stopped:
			k = 2
		case x.total > r.Limit:
			k = 1
		}
		n[k]++
		d[k] += x.d
	}
	t.Logf("fit: %d estimates, %v; over, whole: %d, %v; stopped: %d, %v", n[0], d[0], n[1], d[1], n[2], d[2])
	sort.Slice(log, func(i, j int) bool { return log[i].d > log[j].d })
	for _, x := range log {
		stopped := ""
		if x.stopped {
			stopped = " (stopped)"
		}
		t.Logf("%8.1f ms  %6.2f GiB  %s%s", float64(x.d.Microseconds())/1000, float64(x.total)/(1<<30), x.l, stopped)
	}
}

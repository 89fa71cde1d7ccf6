package tuner

import (
	"os"
	"testing"
	"time"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// TestAdviceCostDebug times, in a fresh process, what the estimate command
// does with a spec: its first estimate, then the allocator advice (skipped
// where AdviceMayHelp says it cannot help), then the same estimate again
// (warm). Run one spec per process, on one core:
//
//	go test -c -o /tmp/tuner.test ./tuner
//	(cd tuner && GOMAXPROCS=1 MEMPLAN_ADVICE_COST=../specs/llama-3-8b.yaml /tmp/tuner.test -test.run TestAdviceCostDebug -test.v)
//
// (docs/performance.md, forty-fifth session;
// bench/results/2026-11-29-devvm-speed-45th/split.sh runs it over every spec).
func TestAdviceCostDebug(t *testing.T) {
	file := os.Getenv("MEMPLAN_ADVICE_COST")
	if file == "" {
		t.Skip("set MEMPLAN_ADVICE_COST=../specs/x.yaml")
	}
	spec, err := model.Load(file, model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r, err := estimate.Estimate(spec)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	may := AdviceMayHelp(spec, r)
	if may {
		if _, err := AdviseAllocConfStop(spec, r.DeviceTotal, AnalyticStop); err != nil {
			t.Fatal(err)
		}
	}
	t2 := time.Now()
	if _, err := estimate.Estimate(spec); err != nil {
		t.Fatal(err)
	}
	t3 := time.Now()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t.Logf("%s: first estimate %.2f ms, advice %.2f ms (runs: %v), warm estimate %.2f ms", file, ms(t1.Sub(t0)), ms(t2.Sub(t1)), may, ms(t3.Sub(t2)))
}

package planner

import (
	"sort"
	"testing"
	"time"

	"github.com/memplan/memplan/model"
)

func TestZZMoETimes(t *testing.T) {
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
	t.Logf("plan %v, %d estimates", time.Since(t0), r.Stats.OracleCalls)
	var tpN, stopN int
	var tpD, allD time.Duration
	for _, x := range log {
		allD += x.d
		if x.l.TP > 1 {
			tpN++
			tpD += x.d
		}
		if x.stopped {
			stopN++
		}
	}
	t.Logf("tp: %d estimates %v of %v; stopped %d", tpN, tpD, allD, stopN)
	sort.Slice(log, func(i, j int) bool { return log[i].d > log[j].d })
	for _, x := range log[:25] {
		t.Logf("%8.1f ms  %6.2f GiB  %s stopped=%v", float64(x.d.Microseconds())/1000, float64(x.total)/(1<<30), x.l, x.stopped)
	}
}

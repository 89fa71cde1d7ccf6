package planner

import (
	"errors"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestSimulatorExpertParallel: the Simulator estimates expert parallelism
// under DDP (fewer experts per rank, less memory) and FSDP (less again),
// and reports it not simulated with ZeRO 1.
func TestSimulatorExpertParallel(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/tiny-qwen3-moe.json", model.Overrides{Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	l := Layout{DP: 4, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1}
	one, err := Simulator{}.Estimate(spec, l)
	if err != nil {
		t.Fatal(err)
	}
	l.EP = 4
	four, err := Simulator{}.Estimate(spec, l)
	if err != nil || four.DeviceTotal >= one.DeviceTotal {
		t.Errorf("dp4·ep4 = %+v, %v; want less than dp4's %d", four.RankMemory, err, one.DeviceTotal)
	}
	l.Zero = 3
	fsdp, err := Simulator{}.Estimate(spec, l)
	if err != nil || fsdp.DeviceTotal >= four.DeviceTotal {
		t.Errorf("dp4·ep4 zero3 = %+v, %v; want less than dp4·ep4's %d", fsdp.RankMemory, err, four.DeviceTotal)
	}
	l.Zero = 1
	var ns *NotSimulatedError
	if _, err := (Simulator{}).Estimate(spec, l); !errors.As(err, &ns) {
		t.Errorf("dp4·ep4 zero1: %v, want a *NotSimulatedError", err)
	}
}

// TestEnumerateExpertParallel: the planner enumerates expert-parallel
// layouts for a mixture of experts whose experts expert parallelism splits
// (Qwen3-MoE's), and none for Llama 4's dense experts, which it refuses
// (model.Model.EPRefusal), so that no refused layout stands among a plan's
// near misses; the plan says what it skipped, and why.
func TestEnumerateExpertParallel(t *testing.T) {
	for _, c := range []struct {
		file string
		ep   bool
	}{
		{"tiny-qwen3-moe.json", true},
		{"llama4-test-4layer.json", false},
	} {
		spec, err := model.LoadHF("../model/testdata/hf/"+c.file, model.Overrides{Seq: 1024})
		if err != nil {
			t.Fatal(err)
		}
		req := Request{GlobalBatch: 8, MaxGPUs: 2, Top: 1}
		r, err := Plan(spec, req, &Fake{})
		if r == nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if err := req.defaults(); err != nil {
			t.Fatal(err)
		}
		ep := false
		req.enumerate(spec, func(l Layout) { ep = ep || l.EP > 1 })
		if ep != c.ep {
			t.Errorf("%s: expert-parallel layouts enumerated %v, want %v", c.file, ep, c.ep)
		}
		if skipped := len(r.Skipped) == 1 && strings.Contains(r.Skipped[0], "expert parallelism"); skipped == c.ep || len(r.Skipped) > 1 {
			t.Errorf("%s: skipped %q, want expert parallelism's reason: %v", c.file, r.Skipped, !c.ep)
		}
	}
}

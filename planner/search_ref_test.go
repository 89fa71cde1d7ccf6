package planner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// bruteForce is the reference search: every layout in rank order is
// estimated by the oracle itself, with no bound, no pruning and no
// memoisation, until req.Top fit. It returns them as "name = bytes", and
// the estimates it ran.
func bruteForce(t *testing.T, spec *model.Spec, req Request, o Oracle) (fits []string, estimates int) {
	t.Helper()
	if err := req.defaults(); err != nil {
		t.Fatal(err)
	}
	res := &Result{InvalidReasons: map[string]int{}}
	limit := limitBytes(spec, req.Band, req.Margin)
	for _, e := range rank(spec, &req, res, shapeOf(spec, model.Params(spec.Model.Lower()))) {
		if len(fits) == req.Top {
			break
		}
		estimates++
		m, err := o.Estimate(spec, e.l)
		if err == nil && m.DeviceTotal <= limit {
			fits = append(fits, fmt.Sprintf("%s = %d", e.l, m.DeviceTotal))
		}
	}
	return fits, estimates
}

func planned(t *testing.T, spec *model.Spec, req Request, o Oracle) ([]string, Stats) {
	t.Helper()
	r, err := Plan(spec, req, o)
	if r == nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range r.Layouts {
		out = append(out, fmt.Sprintf("%s = %d", c.Layout, c.Memory.DeviceTotal))
	}
	return out, r.Stats
}

// TestSearchMatchesBruteForce: the search, with its lower bound, its
// pruning and its memo, returns exactly the layouts (and memory, and
// order) that estimating every layout in rank order returns, on small
// models and devices small enough that most layouts fail, with the
// simulator and with the fake oracle on the 70B benchmark's request.
// (Checked once more by hand, too slow to keep: TinyLlama untied at 4,096
// tokens on 16 GiB up to 32 GPUs, 604 estimates against 60; Qwen2.5-7B at
// 2,048 on 24 GiB up to 16 GPUs, 1,885 against 95.)
func TestSearchMatchesBruteForce(t *testing.T) {
	llama := load(t, "llama-3.2-1b.yaml")
	llama.Training.Seq = 2048
	untied := *llama
	untied.Model.Tied = false // as first recorded, when tied pipelines were not simulated
	untied.Training.Seq = 4096
	small := untied
	small.Device.Memory = 24 << 30
	bf16 := small
	bf16.Training.Precision = model.BF16
	gpt2 := load(t, "gpt2-124m.yaml")
	gpt2.Device.Memory = 8 << 30
	moe, err := model.LoadHF("../model/testdata/hf/tiny-qwen3-moe.json", model.Overrides{Seq: 4096})
	if err != nil {
		t.Fatal(err)
	}
	moe.Device.Memory = 12 << 30
	mistral := load(t, "mistral-7b.yaml")
	mistral.Training.Seq = 4096
	mistral.Training.Precision = model.BF16
	mistral.Device.Memory = 40 << 30
	llama70 := load(t, "llama-3-70b.yaml")
	// Pipelines of every schedule with FSDP and TP inside the stages,
	// where the stage bounds (state, buffers, the interleaved sends) and
	// the ZeRO-3 pipelines' ZeRO-2 twins (Simulator.Canonical) prune.
	piped := small
	piped.Device.Memory = 14 << 30
	for _, tc := range []struct {
		name string
		spec *model.Spec
		req  Request
		o    Oracle
	}{
		{"mistral-7b bf16 40 GiB up to 32 GPUs", mistral, Request{GlobalBatch: 64, MaxGPUs: 32}, Simulator{}},
		{"llama-1b 8 GPUs", llama, Request{GlobalBatch: 64, GPUs: 8, Top: 3}, Simulator{}},
		{"llama-1b untied up to 8 GPUs", &untied, Request{GlobalBatch: 32, MaxGPUs: 8}, Simulator{}},
		{"llama-1b untied 24 GiB up to 16 GPUs", &small, Request{GlobalBatch: 32, MaxGPUs: 16}, Simulator{}},
		{"llama-1b bf16 24 GiB up to 16 GPUs", &bf16, Request{GlobalBatch: 64, MaxGPUs: 16, Top: 5}, Simulator{}},
		{"gpt2 8 GiB", gpt2, Request{GlobalBatch: 64, MaxGPUs: 8}, Simulator{}},
		{"qwen3-moe-tiny 12 GiB", moe, Request{GlobalBatch: 16, MaxGPUs: 8}, Simulator{}},
		{"llama-1b untied 14 GiB up to 16 GPUs, pipelines", &piped, Request{GlobalBatch: 64, MaxGPUs: 16, Top: 5}, Simulator{}},
		{"llama-70b fake", llama70, Request{GlobalBatch: 1024, MaxGPUs: 1024}, &Fake{}},
		{"llama-70b fake dp only", llama70, Request{GlobalBatch: 1024, MaxGPUs: 1024}, &Fake{Unsupported: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, n := bruteForce(t, tc.spec, tc.req, tc.o)
			got, st := planned(t, tc.spec, tc.req, tc.o)
			t.Logf("%d layouts fit; brute force ran %d estimates, the search %d", len(want), n, st.OracleCalls)
			if len(want) == 0 {
				t.Fatalf("no layout fits: the case checks nothing")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("search:\n%q\nbrute force:\n%q", got, want)
			}
		})
	}
}

// TestPlanMatchesOldSearch: on the requests of BenchmarkSearchRate, the
// search returns the layouts the search before the lower bound returned
// (recorded from memplan plan --format json at commit 42b2381, which ran
// 1,348 and 506 estimates for them), in the same order. The memory they
// were recorded with is the estimator's of that commit, which has changed
// since (the fourth session's allocator order): only the layouts are
// compared here; TestSearchMatchesBruteForce checks the memory. When the
// estimator changes which layouts fit, a list is re-recorded from the
// reference search (bruteForce) and says so.
func TestPlanMatchesOldSearch(t *testing.T) {
	llama8 := load(t, "llama-3-8b.yaml")
	llama70 := load(t, "llama-3-70b.yaml")
	llama70.Training.Precision = model.BF16
	for _, tc := range []struct {
		name string
		spec *model.Spec
		req  Request
		want []string
	}{
		// (The forty-seventh session's planner offered dp4·tp4 resharded to
		// 2 here, seventh, until torch 2.11 was found to refuse resharding to
		// fewer ranks beside tensor parallelism: docs/multigpu.md. Checked
		// equal, memory and order, to bruteForce's again then: 5,982
		// estimates, 334 s on two shared cores; the search ran 29.)
		// Re-recorded on 2026-11-27 (seventeenth session), when a
		// tensor-parallel model came to be built on the meta device by
		// default, with no whole load (estimate.buildRank), so that
		// tensor-parallel layouts without a pipeline fit 16 GPUs
		// (checked equal, memory and order, to bruteForce's at that
		// commit: 5,969 estimates, 286 s; the search ran 45). Before: the
		// eighth session's dp16 ZeRO 3 first.
		{"llama-3-70b bf16 up to 1024 GPUs", llama70, Request{GlobalBatch: 1024, MaxGPUs: 1024}, []string{
			"dp4·tp4+sp zero3 loss-parallel ckpt=every-block mb4×acc64 = 75116838912",
			"dp2·tp4+sp·cp2 zero3 loss-parallel ckpt=every-block mb8×acc64 = 75200724992",
			"dp2·tp8+sp zero3 loss-parallel ckpt=every-block mb8×acc64 = 75622252544",
			"dp1·tp8+sp·cp2 zero3 loss-parallel ckpt=every-block mb16×acc64 = 75437703168",
			"dp1·tp4+sp·cp4 zero3 loss-parallel ckpt=every-block mb16×acc64 = 75831967744",
			"dp2·tp8+sp zero2 loss-parallel ckpt=every-block mb4×acc128 = 74257006592",
			"dp1·tp8+sp·cp2 zero2 loss-parallel ckpt=every-block mb8×acc128 = 74349281280",
			"dp2·tp8+sp zero3 loss-parallel ckpt=every-block mb4×acc128 = 65482522624",
			"dp1·tp8+sp·cp2 zero3 loss-parallel ckpt=every-block mb8×acc128 = 66378006528",
			"dp2·tp8+sp zero2 loss-parallel ckpt=every-block mb2×acc256 = 67797778432",
		}},
		// Re-recorded on 2026-11-26 (fourteenth session), when context
		// parallelism with tensor parallelism came to be simulated
		// (checked equal, memory and order, to bruteForce's at that
		// commit: 916 estimates, 11 s; the search ran 48).
		{"llama-3-8b up to 64 GPUs", llama8, Request{GlobalBatch: 512, MaxGPUs: 64}, []string{
			"dp1·tp4+sp zero0 loss-parallel mb1×acc512 = 71392296960",
			"dp1·tp2+sp·cp2 zero3 loss-parallel mb1×acc512 = 73281830912",
			"dp2·tp2+sp zero3 loss-parallel ckpt=every-block mb2×acc128 = 73724329984",
			"dp1·tp2+sp·cp2 zero3 loss-parallel ckpt=every-block mb4×acc128 = 70800900096",
			"dp2·tp2+sp zero2 loss-parallel ckpt=every-block mb1×acc256 = 73290219520",
			"dp1·tp2+sp·cp2 zero2 loss-parallel ckpt=every-block mb2×acc256 = 73378299904",
			"dp2·tp2+sp zero3 loss-parallel ckpt=every-block mb1×acc256 = 59017003008",
			"dp1·tp2+sp·cp2 zero3 loss-parallel ckpt=every-block mb2×acc256 = 60292071424",
			"dp1·tp2+sp·cp2 zero2 loss-parallel ckpt=every-block mb1×acc512 = 67074260992",
			"dp1·tp4+sp zero0 loss-parallel ckpt=every-block mb4×acc128 = 64152928256",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st := planned(t, tc.spec, tc.req, Simulator{})
			t.Logf("%d estimates", st.OracleCalls)
			layouts := func(l []string) []string {
				out := make([]string, len(l))
				for i, s := range l {
					out[i], _, _ = strings.Cut(s, " = ")
				}
				return out
			}
			if fmt.Sprint(layouts(got)) != fmt.Sprint(layouts(tc.want)) {
				t.Errorf("search:\n%q\nbefore:\n%q", got, tc.want)
			}
		})
	}
}

package planner

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

func load(t testing.TB, name string) *model.Spec {
	t.Helper()
	s, err := model.Load("../specs/"+name, model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLayoutString(t *testing.T) {
	every := model.Checkpointing{Mode: model.CkptBlock}
	for _, tc := range []struct {
		l    Layout
		want string
	}{
		{Layout{DP: 8, TP: 4, PP: 2, CP: 1, EP: 1, Zero: 1, Schedule: OneFOneB, Virtual: 1, Micro: 2, Accum: 16}, "dp8·tp4·pp2 zero1 1f1b mb2×acc16"},
		{Layout{DP: 64, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 3, Checkpointing: every, Micro: 1, Accum: 16}, "dp64 zero3 ckpt=every-block mb1×acc16"},
		{Layout{DP: 2, TP: 8, PP: 4, CP: 2, EP: 1, SP: true, LossParallel: true, Schedule: Interleaved, Virtual: 2, Micro: 1, Accum: 8}, "dp2·tp8+sp·pp4·cp2 zero0 interleaved×2 loss-parallel mb1×acc8"},
		{Layout{DP: 32, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 3, ReshardTo: 8, Micro: 1, Accum: 2}, "dp32 zero3 reshard-to-8 mb1×acc2"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.l.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStageLayers(t *testing.T) {
	for _, tc := range []struct {
		layers, stages int64
		want           string
	}{
		{32, 1, "[32]"},
		{32, 8, "[4 5 4 4 4 4 4 3]"}, // 34 effective: 4 r 2
		{80, 4, "[20 21 20 19]"},     // 82 effective: 20 r 2
		{3, 2, "[2 1]"},
		{2, 4, "[0 1 1 0]"},
		{2, 5, "error"},
	} {
		t.Run(strings.TrimSpace(tc.want), func(t *testing.T) {
			got, err := StageLayers(tc.layers, tc.stages)
			s := "error"
			if err == nil {
				s = fmt.Sprint(got)
			}
			if s != tc.want {
				t.Errorf("StageLayers(%d, %d) = %s, want %s", tc.layers, tc.stages, s, tc.want)
			}
			var sum int64
			for _, n := range got {
				sum += n
			}
			if err == nil && sum != tc.layers {
				t.Errorf("StageLayers(%d, %d) sums to %d", tc.layers, tc.stages, sum)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	llama := load(t, "llama-3-70b.yaml") // 64 heads, 8 kv heads, 80 layers, seq 8192
	base := Layout{DP: 1, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1}
	with := func(f func(*Layout)) Layout { l := base; f(&l); return l }
	for _, tc := range []struct {
		name string
		l    Layout
		want string // "" valid, else a substring of the reason
	}{
		{"plain", base, ""},
		{"tp8", with(func(l *Layout) { l.TP, l.SP = 8, true }), ""},
		{"tp16 kv", with(func(l *Layout) { l.TP = 16 }), "key/value heads are not divisible by tp 16"},
		{"tp3 heads", with(func(l *Layout) { l.TP = 3 }), "64 attention heads are not divisible by tp 3"},
		{"sp without tp", with(func(l *Layout) { l.SP = true }), "need tp > 1"},
		{"zero at dp1", with(func(l *Layout) { l.Zero = 3 }), "nothing to shard"},
		{"pp too deep", with(func(l *Layout) { l.PP, l.Schedule, l.Virtual = 83, OneFOneB, 1 }), "more than the 80 layers"},
		{"pp uneven", with(func(l *Layout) { l.PP, l.Schedule, l.Virtual, l.Accum = 3, OneFOneB, 1, 3 }), ""},
		{"1f1b few micro-batches", with(func(l *Layout) { l.PP, l.Schedule, l.Virtual = 3, OneFOneB, 1 }), "at least as many micro-batches"},
		{"interleaved accum", with(func(l *Layout) { l.PP, l.Schedule, l.Virtual, l.Accum = 4, Interleaved, 2, 6 }), "multiple of pp 4"},
		{"cp seq", with(func(l *Layout) { l.CP = 3 }), "not divisible by 2·cp·tp"},
		{"ep dense", with(func(l *Layout) { l.EP, l.DP = 2, 2 }), "needs a mixture-of-experts model"},
		{"reshard to 8", with(func(l *Layout) { l.DP, l.Zero, l.ReshardTo = 32, 3, 8 }), ""},
		{"reshard at zero 2", with(func(l *Layout) { l.DP, l.Zero, l.ReshardTo = 32, 2, 8 }), "needs ZeRO stage 3"},
		{"reshard not dividing", with(func(l *Layout) { l.DP, l.Zero, l.ReshardTo = 32, 3, 6 }), "must divide the data-parallel size 32"},
		{"reshard with cp", with(func(l *Layout) { l.DP, l.CP, l.Zero, l.ReshardTo = 16, 2, 3, 8 }), "not simulated with context parallelism"},
		{"reshard with tp", with(func(l *Layout) { l.DP, l.TP, l.Zero, l.ReshardTo = 16, 2, 3, 4 }), "not supported yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(llama, tc.l)
			var ie *InvalidError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate(%s) = %v, want nil", tc.l, err)
			case tc.want != "" && (!errors.As(err, &ie) || !strings.Contains(ie.Reason, tc.want)):
				t.Errorf("Validate(%s) = %v, want an InvalidError with %q", tc.l, err, tc.want)
			}
		})
	}
}

// TestMonotone checks, on the real estimator, the rules the search prunes
// by (atLeast): a layout that needs at least another's memory by the rules
// must not be predicted below it by more than dominanceFloor allows. Data
// parallelism on GPT-2, and tensor, context and pipeline parallelism on a
// 16-layer Llama (with 4 layers, checkpointing under GPipe costs 10% more
// than none: the rules are for models of realistic depth).
func TestMonotone(t *testing.T) {
	gpt2 := load(t, "gpt2-124m.yaml")
	gpt2.Training.Seq = 512
	llama := load(t, "llama-3.2-1b.yaml")
	llama.Training.Seq = 1024
	llama.Model.NumLayers = 16
	// Two experts a block: FSDP2 pads their shards past two ranks
	// (docs/moe.md §14), where more GPUs need more memory.
	moe, err := model.LoadHF("../model/testdata/hf/tiny-qwen3-moe-2expert.json", model.Overrides{Batch: 1, Seq: 512})
	if err != nil {
		t.Fatal(err)
	}
	// The same along the experts' second dimension (fsdp_experts auto,
	// torchtitan's): no padding, so the rules hold past the experts too.
	moeDim1 := *moe
	moeDim1.Training.FSDPExperts = model.FSDPExpertsAuto
	for _, tc := range []struct {
		name   string
		spec   *model.Spec
		mesh   Layout
		dps    []int64
		accums []int64
		micros []int64
	}{
		{"gpt2 dp", gpt2, Layout{TP: 1, PP: 1, CP: 1, EP: 1}, []int64{1, 2, 4}, []int64{1, 2}, []int64{1, 2, 4}},
		{"llama dp", llama, Layout{TP: 1, PP: 1, CP: 1, EP: 1}, []int64{1, 2, 4}, []int64{1, 2}, []int64{1, 2, 4}},
		{"llama tp2", llama, Layout{TP: 2, PP: 1, CP: 1, EP: 1, SP: true, LossParallel: true}, []int64{1, 2}, []int64{1, 2}, []int64{1, 2}},
		{"llama cp2", llama, Layout{TP: 1, PP: 1, CP: 2, EP: 1}, []int64{1, 2}, []int64{1, 2}, []int64{1, 2}},
		{"llama pp2 1f1b", llama, Layout{TP: 1, PP: 2, CP: 1, EP: 1, Schedule: OneFOneB, Virtual: 1}, []int64{1, 2}, []int64{2, 3, 4}, []int64{1, 2}},
		{"llama pp2 gpipe", llama, Layout{TP: 1, PP: 2, CP: 1, EP: 1, Schedule: GPipe, Virtual: 1}, []int64{1, 2}, []int64{1, 2, 4}, []int64{1, 2}},
		{"moe dp past the experts", moe, Layout{TP: 1, PP: 1, CP: 1, EP: 1}, []int64{1, 2, 4, 8}, []int64{1}, []int64{1, 2}},
		{"moe dp past the experts along dim 1", &moeDim1, Layout{TP: 1, PP: 1, CP: 1, EP: 1}, []int64{1, 2, 4, 8}, []int64{1}, []int64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls []Layout
			for _, dp := range tc.dps {
				for _, z := range []int64{0, 1, 2, 3} {
					for _, ck := range []string{model.CkptNone, model.CkptBlock} {
						for _, mb := range tc.micros {
							for _, acc := range tc.accums {
								l := tc.mesh
								l.DP, l.Zero, l.Checkpointing, l.Micro, l.Accum = dp, z, model.Checkpointing{Mode: ck}, mb, acc
								if Validate(tc.spec, l) == nil && (Simulator{}).Simulates(tc.spec, l) == nil {
									ls = append(ls, l)
								}
							}
						}
					}
				}
			}
			checkMonotone(t, tc.spec, ls)
		})
	}
	// ZeRO 3 resharded to N ranks, between stages 2 and 3 (sharded).
	t.Run("llama dp resharded to n", func(t *testing.T) {
		var ls []Layout
		for _, dp := range []int64{4, 8} {
			for _, z := range []int64{2, 3} {
				for _, to := range []int64{0, 2, 4} {
					if to > 0 && (z != 3 || to >= dp) {
						continue
					}
					for _, ck := range []string{model.CkptNone, model.CkptBlock} {
						for _, mb := range []int64{1, 2} {
							l := Layout{DP: dp, TP: 1, PP: 1, CP: 1, EP: 1, Zero: z, ReshardTo: to,
								Checkpointing: model.Checkpointing{Mode: ck}, Micro: mb, Accum: 1}
							if Validate(llama, l) == nil {
								ls = append(ls, l)
							}
						}
					}
				}
			}
		}
		checkMonotone(t, llama, ls)
	})
}

func checkMonotone(t *testing.T, spec *model.Spec, ls []Layout) {
	t.Helper()
	experts := spec.Model.ShardedExpertRows(&model.Training{})
	programOf := func(l Layout) program { return programOf(l, experts, spec.Training.FSDPExperts) }
	mem := map[program]int64{}
	for _, l := range ls {
		r, err := Simulator{}.Estimate(spec, l)
		if err != nil {
			t.Fatal(err)
		}
		mem[programOf(l)] = r.DeviceTotal
	}
	var pairs int
	var worst float64
	defer func() {
		t.Logf("%d pairs; the most a layout needs less than one it dominates: %.1f%%", pairs, 100*worst)
	}()
	for _, c := range ls {
		for _, f := range ls {
			pc, pf := programOf(c), programOf(f)
			if !atLeast(pc, pf) || pc == pf {
				continue
			}
			pairs++
			worst = max(worst, float64(mem[pf]-mem[pc])/float64(mem[pf]))
			if mem[pc] < dominanceFloor(mem[pf], pf) {
				t.Errorf("%s needs %d B, less than %s's %d B by more than the search allows", c, mem[pc], f, mem[pf])
			}
		}
	}
	if pairs < len(ls) {
		t.Errorf("%d layouts, only %d ordered pairs checked", len(ls), pairs)
	}
}

func TestPlanFake(t *testing.T) {
	spec := load(t, "llama-3-70b.yaml")
	f := &Fake{}
	r, err := Plan(spec, Request{GlobalBatch: 1024, MaxGPUs: 1024}, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Layouts) != 10 {
		t.Fatalf("got %d layouts, want 10", len(r.Layouts))
	}
	for i, c := range r.Layouts {
		if c.Memory == nil || c.Memory.DeviceTotal > r.Limit || c.Layout.GlobalBatch() != 1024 {
			t.Errorf("layout %d %s: %+v does not fit or misses the global batch", i, c.Name, c.Memory)
		}
		if i > 0 && ranksBefore(&c, &r.Layouts[i-1]) {
			t.Errorf("layout %d %s ranks before %s", i, c.Name, r.Layouts[i-1].Name)
		}
	}
	// Every layout with fewer GPUs than the first answer must fail: check
	// the pruned ones against the fake itself.
	best := r.Layouts[0].GPUs
	for _, m := range r.NearMisses {
		if m.GPUs > best {
			t.Errorf("near miss %s uses more GPUs (%d) than the best layout (%d)", m.Name, m.GPUs, best)
		}
		if m.Verdict == Over {
			got, _ := (&Fake{}).Estimate(spec, m.Layout)
			if got.DeviceTotal <= r.Limit {
				t.Errorf("near miss %s was pruned but fits: %d ≤ %d", m.Name, got.DeviceTotal, r.Limit)
			}
		}
	}
	if r.Stats.OracleCalls >= r.Stats.Layouts/10 {
		t.Errorf("%d oracle calls for %d layouts: the search does not prune", r.Stats.OracleCalls, r.Stats.Layouts)
	}
}

func TestPlanSimulator(t *testing.T) {
	spec := load(t, "llama-3.2-1b.yaml")
	spec.Training.Seq = 2048
	r, err := Plan(spec, Request{GlobalBatch: 64, GPUs: 8, Top: 3}, Simulator{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Layouts {
		if c.GPUs != 8 {
			t.Errorf("%s: %d GPUs, want the 8 asked for", c.Name, c.GPUs)
		}
		res, err := estimate.Estimate(Apply(spec, c.Layout))
		if err != nil {
			t.Fatal(err)
		}
		if res.DeviceTotal != c.Memory.DeviceTotal {
			t.Errorf("%s: plan says %d B, estimate %d B", c.Name, c.Memory.DeviceTotal, res.DeviceTotal)
		}
	}
	var ns int
	for _, m := range r.NearMisses {
		if m.Verdict == NotSimulated {
			ns++
		}
	}
	if ns == 0 {
		t.Errorf("no near miss is a layout the simulator cannot run yet")
	}
}

func TestPlanNoFit(t *testing.T) {
	spec := load(t, "llama-3-70b.yaml")
	r, err := Plan(spec, Request{GlobalBatch: 8, GPUs: 1}, Simulator{})
	if !errors.Is(err, ErrNoLayout) || len(r.NearMisses) == 0 {
		t.Fatalf("Plan(70B on 1 GPU) = %v with %d near misses, want ErrNoLayout and near misses", err, len(r.NearMisses))
	}
}

// BenchmarkPlan70B plans Llama-3-70B for a global batch of 1024 over up
// to 1024 GPUs: with a fake oracle that sleeps 1 ms per call and
// simulates every layout (the calls are reported as oracle-calls/op), the
// same fake supporting what the estimator supports today (data
// parallelism), and the real estimator in mixed precision (where memplan
// fits no layout of 70B: the search must rule them all out) and in bf16.
func BenchmarkPlan70B(b *testing.B) {
	spec, err := model.Load("../specs/llama-3-70b.yaml", model.Overrides{})
	if err != nil {
		b.Fatal(err)
	}
	bf16 := *spec
	bf16.Training.Precision = model.BF16
	for _, bc := range []struct {
		name string
		spec *model.Spec
		o    func() Oracle
	}{
		{"fake-1ms", spec, func() Oracle { return &Fake{Delay: time.Millisecond} }},
		{"fake-1ms-dp-only", spec, func() Oracle { return &Fake{Delay: time.Millisecond, Unsupported: true} }},
		{"simulator-amp-bf16", spec, func() Oracle { return Simulator{} }},
		{"simulator-bf16", &bf16, func() Oracle { return Simulator{} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var calls, layouts int
			for i := 0; i < b.N; i++ {
				r, err := Plan(bc.spec, Request{GlobalBatch: 1024, MaxGPUs: 1024}, bc.o())
				if err != nil && !errors.Is(err, ErrNoLayout) {
					b.Fatal(err)
				}
				calls, layouts = r.Stats.OracleCalls, r.Stats.Layouts
			}
			b.ReportMetric(float64(calls), "oracle-calls/op")
			b.ReportMetric(float64(layouts), "layouts/op")
		})
	}
}

// TestProgress: Request.Progress is called once before each estimate, with
// the estimates counted as Stats counts them and the layouts found so far.
func TestProgress(t *testing.T) {
	spec := load(t, "llama-3.2-1b.yaml")
	var seen []Progress
	r, err := Plan(spec, Request{GlobalBatch: 64, GPUs: 8, Top: 3, Progress: func(p Progress) { seen = append(seen, p) }}, Simulator{})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != r.Stats.OracleCalls || len(seen) == 0 {
		t.Fatalf("%d progress calls, want one per estimate (%d)", len(seen), r.Stats.OracleCalls)
	}
	for i, p := range seen {
		if p.Estimates != i+1 || p.Top != 3 || p.Fits > len(r.Layouts) || (i > 0 && p.Fits < seen[i-1].Fits) {
			t.Fatalf("progress %d: %+v (of %d estimates, %d layouts)", i, p, len(seen), len(r.Layouts))
		}
	}
}

// TestPlanFSDPBF16: FSDP2's mixed-precision policy exists at ZeRO 2 and 3
// only, so a plan for an fsdp-bf16 spec lists no layout at a lower stage
// (its layouts would not validate); the others keep every stage.
func TestPlanFSDPBF16(t *testing.T) {
	stages := func(spec *model.Spec) map[int64]bool {
		t.Helper()
		r, err := Plan(spec, Request{GlobalBatch: 64, GPUs: 8, Top: 50}, &Fake{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for _, c := range append(r.Layouts, r.NearMisses...) {
			seen[c.Layout.Zero] = true
		}
		return seen
	}
	spec := load(t, "llama-3.2-1b.yaml")
	spec.Training.Seq, spec.Training.Precision, spec.Training.Zero = 2048, model.FSDPBF16, 3
	if got := stages(spec); got[0] || got[1] || !got[2] && !got[3] {
		t.Errorf("fsdp-bf16: ZeRO stages %v, want 2 and 3 only", got)
	}
	spec.Training.Precision = model.AMPBF16
	if got := stages(spec); !got[0] && !got[1] {
		t.Errorf("amp-bf16: ZeRO stages %v, want the lower ones too", got)
	}
}

// TestPlanPaddedNote: a plan whose layouts shard a block's two experts
// over eight ranks under ZeRO 3 says that FSDP2 pads them and how to plan
// them along the experts' second dimension; planned so, it does not.
func TestPlanPaddedNote(t *testing.T) {
	for _, tc := range []struct {
		experts string
		want    bool
	}{{model.FSDPExpertsDim0, true}, {model.FSDPExpertsAuto, false}} {
		t.Run("experts="+tc.experts, func(t *testing.T) {
			spec, err := model.LoadHF("../model/testdata/hf/tiny-qwen3-moe-2expert.json", model.Overrides{Batch: 1, Seq: 512})
			if err != nil {
				t.Fatal(err)
			}
			spec.Training.FSDPExperts = tc.experts
			r, err := Plan(spec, Request{GlobalBatch: 64, GPUs: 8, Top: 3, Zero: []int64{3}}, Simulator{})
			if err != nil {
				t.Fatal(err)
			}
			got := len(r.Notes) == 1 && strings.Contains(r.Notes[0], "2 experts") && strings.Contains(r.Notes[0], "--fsdp-experts auto")
			if got != tc.want || (!tc.want && len(r.Notes) > 0) {
				t.Errorf("notes %q, want the padded experts' note: %v", r.Notes, tc.want)
			}
		})
	}
}

// TestValidateKnownFailure: layouts that would stop the run for another
// reason than memory (model.KnownFailure) are ruled out: OLMo 2 under
// FSDP2's bf16 policy is planned without checkpointing only.
func TestValidateKnownFailure(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/olmo2-1b.json", model.Overrides{Batch: 1, Seq: 4096, Precision: model.FSDPBF16, DP: 2, Zero: "3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range []string{model.CkptNone, model.CkptBlock} {
		l := Layout{DP: 2, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 3, Checkpointing: model.Checkpointing{Mode: ck}, Micro: 1, Accum: 1}
		err := Validate(spec, l)
		var ie *InvalidError
		if ruled := errors.As(err, &ie) && strings.Contains(ie.Reason, "CheckpointError"); ruled != (ck == model.CkptBlock) {
			t.Errorf("%s: Validate = %v", l, err)
		}
	}
}

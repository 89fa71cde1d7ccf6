package tuner

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// allFixes is the search before it left out beaten fixes: every change
// estimated, every GPU count walked. TestFixesMatchFullSearch checks that
// Fixes returns its fitting fixes less those another fitting fix beats.
func allFixes(spec *model.Spec, band Band, margin float64, oracle Oracle) []Fix {
	t := spec.Training
	cs := singleGPU(spec) // the same candidates, every one estimated
	experts := spec.Model.ShardedExpertRows(&model.Training{})
	var out []Fix
	try := func(c cand) (Fix, bool) {
		s := *spec
		s.Training.Batch = 1
		c.apply(&s.Training)
		v, err := oracle(&s)
		if err != nil {
			return Fix{}, false
		}
		return Fix{Change: c.change, Why: c.why, DeviceTotal: v, GPUs: int64(max(s.Training.DP, 1)),
			Fill: float64(v) / float64(spec.Device.Memory),
			Fits: Fits(v, spec.Device.Memory, band, margin) == FitsTarget, Cost: c.cost}, true
	}
	for _, c := range cs {
		if f, ok := try(c); ok {
			out = append(out, f)
		}
	}
	// Sharding: for each ZeRO stage the fewest GPUs (powers of two up to
	// maxDP) that fit, with and without checkpointing.
	why := [4]string{"", "optimizer state sharded over the GPUs (ZeroRedundancyOptimizer, DeepSpeed stage 1)",
		"optimizer state and gradients sharded, whole parameters only during forward and backward (FSDP without resharding, DeepSpeed stage 2)",
		"optimizer state, gradients and parameters sharded (FSDP fully_shard, DeepSpeed stage 3)"}
	ckpts := []bool{false}
	if t.Checkpointing.Mode == model.CkptNone {
		ckpts = append(ckpts, true)
	}
	// walk estimates at(n) over the GPU counts, skipping those it refuses,
	// up to the first that fits or fails, and keeps the last estimated.
	walk := func(at func(n int64) (cand, bool)) {
		var last Fix
		found := false
		for n := firstShardDP(t); n <= maxDP; n *= 2 {
			c, ok := at(n)
			if !ok {
				continue
			}
			f, ok := try(c)
			if !ok {
				break
			}
			last, found = f, true
			if f.Fits {
				break
			}
		}
		if found {
			out = append(out, last)
		}
	}
	withCkpt := func(change string, cost int, ck bool) (string, int) {
		if ck {
			return "--checkpointing every-block " + change, cost + 1
		}
		return change, cost
	}
	for _, ck := range ckpts {
		for z := int64(max(t.Zero, 0) + 1); z <= 3; z++ {
			if z == 3 {
				// ZeRO 3 resharded to a node's GPUs, before ZeRO 3.
				walk(func(n int64) (cand, bool) {
					at := t
					at.DP, at.Zero, at.ReshardAfterForward = n, 3, model.NodeGPUs
					if n <= model.NodeGPUs || model.ReshardError(&at) != nil || model.ExpertsPadded(experts, &at) {
						return cand{}, false
					}
					change, cost := withCkpt(fmt.Sprintf("--dp %d --zero 3 --reshard-after-forward %d", n, model.NodeGPUs), 7, ck)
					return cand{change, fmt.Sprintf("parameters sharded, each unit keeping 1/%d of them from its forward to its backward, whose all-gather stays inside a node of %d GPUs (FSDP2's reshard_after_forward=%d), %d GPUs",
						model.NodeGPUs, model.NodeGPUs, model.NodeGPUs, n), cost, func(x *model.Training) {
						x.DP, x.Zero, x.ReshardAfterForward = n, 3, model.NodeGPUs
						if ck {
							x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
						}
					}}, true
				})
			}
			walk(func(n int64) (cand, bool) {
				change, cost := withCkpt(fmt.Sprintf("--dp %d --zero %d", n, z), 4+int(z), ck)
				c := cand{change, fmt.Sprintf("%s, %d GPUs", why[z], n), cost, func(x *model.Training) {
					x.DP, x.Zero = n, z
					if ck {
						x.Checkpointing = model.Checkpointing{Mode: model.CkptBlock}
					}
				}}
				if at := t; func() bool { at.DP, at.Zero = n, z; return model.ExpertsPadded(experts, &at) }() {
					c = autoExperts(c) // past the experts, sharded along their second dimension
				}
				return c, true
			})
		}
	}
	// Offload to host memory, on the GPUs the job already has.
	for _, c := range offload() {
		if f, ok := try(c); ok {
			out = append(out, f)
		}
	}
	return rank(out, spec.Device.Name)
}

// unbeaten keeps the fixes of a ranked list that no other fitting fix
// beats on GPUs and cost (what Fixes promises).
func unbeaten(fs []Fix) []Fix {
	if len(fs) == 0 || !fs[0].Fits {
		return fs
	}
	var keep []Fix
	for _, f := range fs {
		beaten := false
		for _, x := range fs {
			if x.GPUs <= f.GPUs && x.Cost <= f.Cost && (x.GPUs < f.GPUs || x.Cost < f.Cost) {
				beaten = true
			}
		}
		if !beaten {
			keep = append(keep, f)
		}
	}
	return keep
}

func TestFixesMatchFullSearch(t *testing.T) {
	cases := []struct{ file, device string }{
		{"llama-3-8b.yaml", "h100-80gb"},
		{"llama-3-8b.yaml", "t4"},
		{"mistral-7b.yaml", "rtx-4090"},
		{"qwen2.5-7b.yaml", "a100-40gb"},
		{"llama-3-70b.yaml", "h100-80gb"},
		{"llama-3.2-1b.yaml", "t4"},
		{"gpt2-xl.yaml", "t4"},
		{"tinyllama-1.1b.yaml", "v100-16gb"},
		{"llama-3-8b-zero3.yaml", "t4"},
		{"resnet-101.yaml", "t4"},
	}
	for _, c := range cases {
		t.Run(c.file+"/"+c.device, func(t *testing.T) {
			s := spec(t, c.file)
			d, ok := model.LookupDevice(c.device)
			if !ok {
				t.Fatalf("no device %s", c.device)
			}
			s.Device = d
			s.Training.Seq = max(s.Training.Seq, 1)
			var calls int
			count := func(x *model.Spec) (int64, error) { calls++; return Analytic(x) }
			got := Fixes(s, DefaultBand, DefaultMargin, count)
			n := calls
			calls = 0
			want := unbeaten(allFixes(s, DefaultBand, DefaultMargin, count))
			full := calls
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Fixes =\n%+v\nwant\n%+v", got, want)
			}
			calls = 0
			first := FirstFix(s, DefaultBand, DefaultMargin, count)
			if len(want) > 0 && want[0].Fits {
				want = want[:1]
			}
			if !reflect.DeepEqual(first, want) {
				t.Errorf("FirstFix =\n%+v\nwant\n%+v", first, want)
			}
			t.Logf("%d estimates, the full search %d, FirstFix %d", n, full, calls)
		})
	}
}

// TestFirstFixWithBound: a bound that knows each change's total (here the
// totals a first search recorded) leaves out the changes that miss without
// estimating them, and the first fix is the same.
func TestFirstFixWithBound(t *testing.T) {
	for _, c := range []struct{ file, device string }{
		{"llama-3-8b.yaml", "t4"}, {"llama-3-70b.yaml", "h100-80gb"}, {"gpt2-xl.yaml", "t4"},
	} {
		t.Run(c.file+"/"+c.device, func(t *testing.T) {
			s := spec(t, c.file)
			d, _ := model.LookupDevice(c.device)
			s.Device = d
			seen := map[model.Training]int64{}
			record := func(x *model.Spec) (int64, error) {
				v, err := Analytic(x)
				seen[x.Training] = v
				return v, err
			}
			cons := Constraints{Margin: DefaultMargin, FirstFix: true}
			want, err := Tune(s, DefaultBand, cons, record)
			if !errors.Is(err, ErrNoFit) {
				t.Fatalf("err = %v, want ErrNoFit", err)
			}
			calls := 0
			count := func(x *model.Spec) (int64, error) { calls++; return Analytic(x) }
			cons.Bound = func(x *model.Spec) int64 { return seen[x.Training] }
			got, _ := Tune(s, DefaultBand, cons, count)
			if len(want.Fixes) > 0 && want.Fixes[0].Fits {
				if len(got.Fixes) == 0 || got.Fixes[0] != want.Fixes[0] {
					t.Errorf("first fix = %+v, want %+v", got.Fixes, want.Fixes[0])
				}
			} else if len(got.Fixes) > 0 && got.Fixes[0].Fits {
				t.Errorf("first fix = %+v, want none that fits", got.Fixes[0])
			}
			if calls >= len(seen) {
				t.Errorf("%d estimates with the bound, %d without", calls, len(seen))
			}
			t.Logf("%d estimates with the bound, %d without", calls, len(seen))
		})
	}
}

// TestFixesWithStop: estimating the fixes through a StopOracle
// (Constraints.Stop, AnalyticStop) gives Tune's fixes exactly, the
// closest miss included when none fits, and FirstFix's first fix; some
// of its estimates stop.
func TestFixesWithStop(t *testing.T) {
	for _, c := range []struct{ file, device string }{
		{"llama-3-8b.yaml", "h100-80gb"}, {"llama-3-8b.yaml", "t4"}, {"llama-3-70b.yaml", "h100-80gb"}, {"llama-3-70b.yaml", "t4"},
		{"gpt2-xl.yaml", "t4"}, {"mistral-7b.yaml", "rtx-4090"}, {"qwen2.5-7b.yaml", "a100-40gb"}, {"tinyllama-1.1b.yaml", "v100-16gb"},
	} {
		t.Run(c.file+"/"+c.device, func(t *testing.T) {
			s := spec(t, c.file)
			d, _ := model.LookupDevice(c.device)
			s.Device = d
			stopped := 0
			stop := func(x *model.Spec, above int64) (int64, bool, error) {
				v, st, err := AnalyticStop(x, above)
				if st {
					stopped++
					if v <= above {
						t.Errorf("stopped at %d, not above %d", v, above)
					}
				}
				return v, st, err
			}
			for _, first := range []bool{false, true} {
				cons := Constraints{Margin: DefaultMargin, FirstFix: first}
				want, err := Tune(s, DefaultBand, cons, Analytic)
				if !errors.Is(err, ErrNoFit) {
					t.Fatalf("err = %v, want ErrNoFit", err)
				}
				cons.Stop = stop
				got, _ := Tune(s, DefaultBand, cons, Analytic)
				switch {
				case !first && !reflect.DeepEqual(got.Fixes, want.Fixes):
					t.Errorf("Fixes with Stop =\n%+v\nwant\n%+v", got.Fixes, want.Fixes)
				case first && len(want.Fixes) > 0 && want.Fixes[0].Fits && (len(got.Fixes) == 0 || got.Fixes[0] != want.Fixes[0]):
					t.Errorf("FirstFix with Stop = %+v, want %+v", got.Fixes, want.Fixes[0])
				case first && (len(want.Fixes) == 0 || !want.Fixes[0].Fits) && len(got.Fixes) > 0 && got.Fixes[0].Fits:
					t.Errorf("FirstFix with Stop = %+v, want none that fits", got.Fixes[0])
				}
			}
			t.Logf("%d estimates stopped", stopped)
		})
	}
}

// TestFixStepPause: a DDP job that misses only by the old gradient bucket
// its rebuild keeps (estimate.DDPSettle) gets the free fix of pausing after
// the first step, first; one that already pauses does not.
func TestFixStepPause(t *testing.T) {
	spec, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{Batch: 1, Seq: 1024, DP: 2, Zero: "0"})
	if err != nil {
		t.Fatal(err)
	}
	raced, err := Analytic(spec)
	if err != nil {
		t.Fatal(err)
	}
	paused := *spec
	paused.Training.StepPause = 0.2
	settled, err := Analytic(&paused)
	if err != nil {
		t.Fatal(err)
	}
	if settled >= raced {
		t.Fatalf("device total %d with the pause, %d without: want less", settled, raced)
	}
	// A device the paused job fills to the band's top, and the raced one
	// overfills.
	spec.Device.Memory = int64(float64(settled) / (DefaultBand.Hi - DefaultMargin))
	paused.Device = spec.Device
	fixes := Fixes(spec, DefaultBand, DefaultMargin, Analytic)
	if len(fixes) == 0 || fixes[0].Change != "--step-pause 0.2" || !fixes[0].Fits || fixes[0].Cost != 0 {
		t.Fatalf("fixes %+v, want --step-pause 0.2 first, fitting, at no cost", fixes)
	}
	for _, f := range Fixes(&paused, DefaultBand, DefaultMargin, Analytic) {
		if f.Change == "--step-pause 0.2" {
			t.Errorf("a job that pauses already was offered %q", f.Change)
		}
	}
}

// TestFixEmptyCacheAfterWrap: an FSDP2 job over a model built on the host
// whose steps reserve more around the blocks the wrapping left cached
// (Phi-2 under ZeRO 3 on eight GPUs: docs/multigpu.md) gets the free fix of
// emptying the cache after fully_shard, first, on a device the emptied job
// fills to the band's top; a job that empties it already, or made on the
// meta device, is not offered it.
func TestFixEmptyCacheAfterWrap(t *testing.T) {
	load := func(o model.Overrides) *model.Spec {
		t.Helper()
		o.Seq, o.DP, o.Zero, o.Precision, o.Optimizer = 512, 8, "3", model.AMPBF16, "adam8bit"
		s, err := model.LoadHF("../model/testdata/hf/phi-2.json", o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	spec, emptied := load(model.Overrides{}), load(model.Overrides{EmptyCacheAfterWrap: true})
	kept, err := Analytic(spec)
	if err != nil {
		t.Fatal(err)
	}
	lower, err := Analytic(emptied)
	if err != nil {
		t.Fatal(err)
	}
	if lower >= kept {
		t.Fatalf("device total %d with the cache emptied, %d kept: want less", lower, kept)
	}
	spec.Device.Memory = int64(float64(lower) / (DefaultBand.Hi - DefaultMargin))
	fixes := Fixes(spec, DefaultBand, DefaultMargin, Analytic)
	if len(fixes) == 0 || fixes[0].Change != "--empty-cache-after-wrap" || !fixes[0].Fits || fixes[0].Cost != 0 {
		t.Fatalf("fixes %+v, want --empty-cache-after-wrap first, fitting, at no cost", fixes)
	}
	for _, s := range []*model.Spec{emptied, load(model.Overrides{FSDPInit: model.FSDPInitMeta})} {
		s.Device = spec.Device
		for _, f := range Fixes(s, DefaultBand, DefaultMargin, Analytic) {
			if f.Change == "--empty-cache-after-wrap" {
				t.Errorf("fsdp_init %q, empty_cache_after_wrap %v: offered %q", s.Training.FSDPInit, s.Training.EmptyCacheAfterWrap, f.Change)
			}
		}
	}
}

// TestFixShardsOnItsGPUs: a data-parallel job that misses is first offered
// a higher ZeRO stage on the GPUs it has, before more GPUs.
func TestFixShardsOnItsGPUs(t *testing.T) {
	spec, err := model.Load("../specs/llama-3-70b.yaml", model.Overrides{Batch: 1, Seq: 4096, DP: 8, Zero: "0",
		Precision: "bf16", LoRA: 16, Dev: "h100-80gb"})
	if err != nil {
		t.Fatal(err)
	}
	fixes := Fixes(spec, DefaultBand, DefaultMargin, Analytic)
	if len(fixes) == 0 || fixes[0].Change != "--dp 8 --zero 3" || fixes[0].GPUs != 8 || !fixes[0].Fits {
		t.Fatalf("fixes %+v, want --dp 8 --zero 3 first, fitting on the job's 8 GPUs", fixes)
	}
}

// TestFixLoRATargets: LoRA on every linear of Qwen3-30B-A3B adapts each
// expert through peft's ParamWrapper (docs/lora.md §14) and fits no H100
// even with checkpointing; attention adapters with checkpointing fit one,
// and are offered before more GPUs. A job with attention adapters is not
// offered them.
func TestFixLoRATargets(t *testing.T) {
	load := func(targets string) *model.Spec {
		t.Helper()
		s, err := model.LoadHF("../model/testdata/hf/qwen3-30b-a3b.json", model.Overrides{Batch: 1, Seq: 4096,
			Precision: model.BF16, LoRA: 16, LoRATargets: targets, Dev: "h100-80gb"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	fixes := Fixes(load(model.TargetsAll), DefaultBand, DefaultMargin, Analytic)
	if len(fixes) == 0 || fixes[0].Change != "--lora-targets attn --checkpointing every-block" || !fixes[0].Fits || fixes[0].GPUs != 1 {
		t.Fatalf("fixes %+v, want attention adapters with checkpointing first, fitting one GPU", fixes)
	}
	for _, f := range Fixes(load(model.TargetsAttn), DefaultBand, DefaultMargin, Analytic) {
		if f.Change == "--lora-targets attn" || f.Change == "--lora-targets attn --checkpointing every-block" {
			t.Errorf("a job with attention adapters was offered %q", f.Change)
		}
	}
}

// TestFixesPastTheExperts: FSDP2 pads the shards of a block's experts
// over more ranks than it has experts, so past them memory per GPU grows
// with the GPUs (model.Model.ShardedExpertRows). Llama 4 Scout (16
// experts) with LoRA on the attention at 4,096 tokens fits eight H100s
// under ZeRO 3 with checkpointing, misses on 64; the search must not take
// the miss on 64 for a miss on fewer, and finds what walking every GPU
// count finds.
func TestFixesPastTheExperts(t *testing.T) {
	s, err := model.LoadHF("../model/testdata/hf/llama4-scout.json", model.Overrides{Batch: 1, Seq: 4096,
		Precision: "bf16", LoRA: 16, LoRATargets: model.TargetsAttn, Dev: "h100-80gb"})
	if err != nil {
		t.Fatal(err)
	}
	got := Fixes(s, DefaultBand, DefaultMargin, Analytic)
	want := unbeaten(allFixes(s, DefaultBand, DefaultMargin, Analytic))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fixes =\n%+v\nwant\n%+v", got, want)
	}
	if len(got) == 0 || !got[0].Fits || got[0].GPUs != 8 {
		t.Errorf("fixes %+v, want one that fits on 8 GPUs first", got)
	}
}

// TestFixAutoExperts: where FSDP2 pads a block's experts (Mixtral's 8 over
// 16 ranks, docs/multigpu.md "FSDP2's padded shards"), sharding them along
// their second dimension is a fix on the job's own GPUs, and the sharding
// search past the experts shards them so: from 2 GPUs under ZeRO 2 the
// fewest that fit under ZeRO 3 are 16 with --fsdp-experts auto, where
// padded shards need more than an H200.
func TestFixAutoExperts(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    model.Overrides
		want string
		gpus int64
	}{
		{"padded on its GPUs", model.Overrides{DP: 16, Zero: "3", Checkpointing: "every-block"}, "--fsdp-experts auto", 16},
		{"sharded past the experts", model.Overrides{DP: 2, Zero: "2"}, "--dp 16 --zero 3 --fsdp-experts auto", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Batch, o.Seq, o.Precision, o.Dev = 1, 4096, "fsdp-bf16", "h200-141gb"
			s, err := model.LoadHF("../model/testdata/hf/mixtral-8x7b.json", o)
			if err != nil {
				t.Fatal(err)
			}
			got := Fixes(s, DefaultBand, DefaultMargin, Analytic)
			var found *Fix
			for i := range got {
				if got[i].Change == tc.want {
					found = &got[i]
				}
			}
			if found == nil || !found.Fits || found.GPUs != tc.gpus {
				t.Fatalf("fixes %+v, want %q fitting on %d GPUs", got, tc.want, tc.gpus)
			}
			if want := unbeaten(allFixes(s, DefaultBand, DefaultMargin, Analytic)); !reflect.DeepEqual(got, want) {
				t.Errorf("Fixes =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestFixNoKnownFailure: a fix that would stop the run for another reason
// than memory (model.KnownFailure: OLMo 2 checkpointed under FSDP2's bf16
// policy) is not offered: under that policy checkpointing comes only with
// another precision, where the same job in bf16 is offered it alone.
func TestFixNoKnownFailure(t *testing.T) {
	for _, prec := range []string{model.FSDPBF16, model.BF16} {
		spec, err := model.LoadHF("../model/testdata/hf/olmo2-7b.json", model.Overrides{Batch: 1, Seq: 16384, DP: 8, Zero: "3",
			Precision: prec, Dev: "h100-80gb"})
		if err != nil {
			t.Fatal(err)
		}
		alone := false
		for _, f := range Fixes(spec, DefaultBand, DefaultMargin, Analytic) {
			if !strings.Contains(f.Change, "--checkpointing") {
				continue
			}
			alone = alone || !strings.Contains(f.Change, "--precision")
			if prec == model.FSDPBF16 && !strings.Contains(f.Change, "--precision") {
				t.Errorf("fsdp-bf16: offered %q, which stops the run", f.Change)
			}
		}
		if prec == model.BF16 && !alone {
			t.Errorf("bf16: checkpointing alone not offered")
		}
	}
}

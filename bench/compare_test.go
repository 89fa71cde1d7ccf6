package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// knownGaps are configurations whose misses have a found or suspected
// cause that the estimator does not model yet (docs/accuracy.md). They are
// reported, and excluded from the worst-case and under-prediction targets
// for the metrics named; everything else must meet every target. None
// since the thirty-third session: ViT-B/16 checkpointed at batch 128, 4.5%
// under in reserved memory since the fifth, is exact since cuDNN's first
// convolution opens room in the context's address space
// (alloc.Allocator.LibraryLoaded, docs/allocator.md §8).
var knownGaps = []struct {
	match   string
	metrics []int
	why     string
}{}

func gap(label string, m int) bool {
	for _, g := range knownGaps {
		if strings.HasPrefix(label, g.match) && contains(g.metrics, m) {
			return true
		}
	}
	return false
}

// TestAccuracyTargets predicts every configuration measured on the H100 and
// checks the accuracy targets (Targets, UnderLimit).
func TestAccuracyTargets(t *testing.T) {
	rep, err := Compare("..", []string{"results/2026-11-22-h100.jsonl", "results/2026-11-22-h100-hf.jsonl"},
		[]string{"results/2026-11-22-h100-heldout.jsonl", "results/2026-11-22-h100-heldout2.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tuning.N < 30 || rep.HeldOut.N < rep.All.N/5 {
		t.Fatalf("%d tuning and %d held-out configurations; want ≥ 30 and a fifth held out", rep.Tuning.N, rep.HeldOut.N)
	}
	checkMedians(t, rep)
	for _, r := range rep.Rows {
		for m := 0; m < NumMetrics; m++ {
			e := r.Err[m]
			if gap(r.Label, m) {
				if e > Targets.Worst[m] {
					t.Errorf("%s: %s %+.1f%% over; known gaps are under-predictions", r.Label, MetricNames[m], 100*e)
				}
				if e >= -UnderLimit {
					t.Errorf("%s: %s %+.1f%% meets the targets: no longer a known gap", r.Label, MetricNames[m], 100*e)
				}
				continue
			}
			if e < -UnderLimit || abs(e) > Targets.Worst[m] {
				t.Errorf("%s: %s error %+.1f%% (worst target %.0f%%, under-prediction limit %.0f%%)",
					r.Label, MetricNames[m], 100*e, 100*Targets.Worst[m], 100*UnderLimit)
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestShardingAccuracy holds the data-parallel and ZeRO predictions to what
// they reach on one rank measured with a fake process group
// (results/2026-11-22-h100-zero.jsonl, and the held-out
// results/2026-11-22-h100-zero-heldout.jsonl): peak allocated within 12%, and
// nothing more than 10% under in any total. The tighter targets of
// TestAccuracyTargets are not met yet for FSDP (docs/accuracy.md).
func TestShardingAccuracy(t *testing.T) {
	rep, err := Compare("..", []string{"results/2026-11-22-h100-zero.jsonl"}, []string{"results/2026-11-22-h100-zero-heldout.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.All.N < 12 {
		t.Fatalf("%d configurations, want 12", rep.All.N)
	}
	for _, r := range rep.Rows {
		if abs(r.Err[Allocated]) > 0.12 {
			t.Errorf("%s: peak allocated %+.1f%%", r.Label, 100*r.Err[Allocated])
		}
		for m := 0; m < NumMetrics; m++ {
			if r.Err[m] < -0.10 {
				t.Errorf("%s: %s %+.1f%%", r.Label, MetricNames[m], 100*r.Err[m])
			}
		}
	}
}

// TestEmptyCacheAfterWrapMeasured holds model.Training.EmptyCacheAfterWrap
// to the fake-process-group FSDP2 configurations measured both ways on
// one H100: before measure.py's shard() emptied the cache after wrapping
// (keptCacheFiles) and again after (the emptycache files). Each record,
// predicted with the way it ran, is within 2% in peak reserved, and the
// records' mean error so is smaller than predicted the other way (the
// checkpointed Llama-3.2-1B lines: 0.0% against 2.6% either way).
func TestEmptyCacheAfterWrapMeasured(t *testing.T) {
	files := append(slices.Clone(keptCacheFiles[1:]), // the diagnostic file's records are not runs of the loop
		"results/2026-11-23-h100-zero-emptycache.jsonl", "results/2026-11-23-h100-zero-emptycache-heldout.jsonl")
	var own, other float64
	n, kept := 0, 0
	for _, f := range files {
		recs, err := ReadRecords(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if z, _ := r.Training["zero"].(float64); !r.OK || z < 2 {
				continue
			}
			o := r.Overrides()
			if o.EmptyCacheAfterWrap == r.KeepCache {
				t.Errorf("%s (%s): empty_cache_after_wrap %v", r.Label, f, o.EmptyCacheAfterWrap)
			}
			var e [2]float64
			for i, empty := range []bool{o.EmptyCacheAfterWrap, !o.EmptyCacheAfterWrap} {
				r.Training["empty_cache_after_wrap"] = empty
				p, err := r.predict("..")
				if err != nil {
					t.Fatal(err)
				}
				e[i] = float64(p[Reserved])/float64(r.measured()[Reserved]) - 1
			}
			if abs(e[0]) > 0.02 {
				t.Errorf("%s (%s): peak reserved %+.1f%% (the other way %+.1f%%)", r.Label, f, 100*e[0], 100*e[1])
			}
			t.Logf("%s (%s): %+.2f%%, the other way %+.2f%%", r.Label, f, 100*e[0], 100*e[1])
			own, other = own+abs(e[0]), other+abs(e[1])
			n++
			if r.KeepCache {
				kept++
			}
		}
	}
	if kept < 10 || n-kept < 10 {
		t.Fatalf("%d records that kept the cache and %d that emptied it, want 10 or more each", kept, n-kept)
	}
	if own >= other {
		t.Errorf("mean error %.2f%% predicted as each ran, %.2f%% the other way", 100*own/float64(n), 100*other/float64(n))
	}
}

// TestDistOverrides checks that a data-parallel record (bench/torch/dist)
// maps its mode to memplan's dp, zero and bucket view, and is compared on
// its busiest rank.
func TestDistOverrides(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		reshard any
		zero    string
		view    bool
		world   int64
		to      int64 // reshard_after_forward
	}{
		{"ddp", nil, "0", false, 2, 0},
		{"ddp-view", nil, "0", true, 2, 0},
		{"zero1", nil, "1", false, 2, 0},
		{"fsdp", "false", "2", false, 2, 0},
		{"fsdp", "true", "3", false, 2, 0},
		{"fsdp", "2", "3", false, 2, 0},  // N = the world is True
		{"fsdp", "1", "2", false, 16, 0}, // N = 1 is False
		{"fsdp", "4", "3", false, 16, 4},
	} {
		t.Run(tc.mode+fmt.Sprint(tc.reshard, "-", tc.world), func(t *testing.T) {
			r := Record{Mode: tc.mode, Reshard: tc.reshard, World: tc.world, BusiestAllocated: 3, BusiestReserved: 4, BusiestDevice: 5}
			o := r.Overrides()
			if o.DP != tc.world || o.Zero != tc.zero || o.BucketView != tc.view || o.ReshardAfterForward != tc.to {
				t.Errorf("got dp %d zero %q view %v reshard_after_forward %d, want %d %q %v %d",
					o.DP, o.Zero, o.BucketView, o.ReshardAfterForward, tc.world, tc.zero, tc.view, tc.to)
			}
			if m := r.measured(); m != [NumMetrics]int64{3, 4, 5} {
				t.Errorf("measured %v, want the busiest rank's", m)
			}
		})
	}
	// train.py empties the cache after wrapping unless --keep-cache.
	for _, keep := range []bool{false, true} {
		r := Record{Mode: "fsdp", Reshard: "true", World: 2, KeepCache: keep}
		if o := r.Overrides(); o.EmptyCacheAfterWrap == keep {
			t.Errorf("FSDP2 with keep_cache %v: empty_cache_after_wrap %v", keep, o.EmptyCacheAfterWrap)
		}
	}
	// train.py --lora: the adapters apply on top of the data parallelism.
	r := Record{Mode: "fsdp", Reshard: "true", World: 2,
		LoRA: &RecordLoRA{Rank: 16, Alpha: 16, Targets: "all", AdapterDtype: "base"}}
	if o := r.Overrides(); o.DP != 2 || o.Zero != "3" || o.LoRA != 16 || o.LoRATargets != "all" || o.LoRAAdapterDtype != "base" {
		t.Errorf("LoRA under FSDP2: overrides %+v", o)
	}
}

// multiGPUGaps are the real multi-GPU configurations more than UnderLimit
// under, with what is known of them (docs/multigpu.md).
var multiGPUGaps = map[string][]int{
	// ZeRO-1 in pure bf16: rank 0 held one more bf16 copy of the
	// parameters than rank 1 at its peak in one run of forty-four: DDP's
	// rebuild race (docs/multigpu.md), which train.py's pause between
	// steps (nvidia-smi, told to memplan as --step-pause 0.2) avoided in
	// the other forty-three.
	"specs/gpt2-124m.yaml --mode zero1 --batch 4 --seq 1024 --precision bf16": {Allocated},
	// Random routing under expert parallelism: the routed rows change
	// from step to step, and in this run one rank's cache stopped fitting
	// them and mapped 10 and then 7 GB more in its second and third steps
	// (76.5 GB reserved, −7.1%); run again with its history, both ranks
	// reserved 70.0 GB (+1.5% predicted). memplan says so in a note
	// (results/2026-11-27-h200x2-deepseek-ep-traces/README.md).
	"model/testdata/hf/deepseek-v2-2layer.json --mode fsdp --reshard false --ep 2 --router random --batch 1 --seq 2048 --precision fsdp-bf16": {Reserved, Device},
}

// multiGPUOver are configurations over the worst-case targets, never under,
// each with why.
var multiGPUOver = map[string][]int{
	// Random routing, where memplan applies the largest share of routed
	// rows a run measured to every MoE block of every step (--ep-skew is
	// one number; docs/moe.md §4.1).
	"bench/torch/hf/tiny-mixtral.json --mode fsdp --reshard false --ep 2 --router random --batch 2 --seq 2048 --precision amp-bf16": {Allocated, Reserved, Device},
}

// TestMultiGPUAccuracy holds the predictions for real torchrun runs (the
// busiest rank) to issue 12's targets: medians within 2% for peak
// allocated and 3% for reserved and device, worst within 6% and 8%,
// nothing more than UnderLimit under except the listed gaps (and those
// must still be under, so that the list stays true). Four comparisons: two
// H200s (world size 2), four (world size 4, bench/torch/dist/grid-4.txt
// and heldout-4.txt), the eighth session's held-out sets 5–8 (world sizes
// 2 and 4 on one 4 × H200 host), FSDP2 under allocator settings, expert
// parallelism, and the eleventh and twenty-second sessions' new families.
func TestMultiGPUAccuracy(t *testing.T) {
	under := map[gapKey]bool{}
	for _, tc := range []struct {
		name             string
		tuning, heldOut  string
		minTuning, minHO int
	}{
		{"2xH200", "results/2026-11-23-h200x2-dist.jsonl", "results/2026-11-23-h200x2-dist-heldout.jsonl", 20, 7},
		{"4xH200", "results/2026-11-26-h200x4-dp.jsonl", "results/2026-11-26-h200x4-dp-heldout.jsonl", 7, 2},
		// The eighth session's held-out sets 5–8 (2 and 4 GPUs, one host).
		{"4xH200 sets 5-8", "", "results/2026-11-26-h200x4-*heldout[5-8].jsonl", 0, 13},
		// FSDP2 under allocator settings (issue 14): the 2 x H200 grid
		// and the eighth session's held-out set.
		{"FSDP2 allocator settings", "results/2026-11-23-h200x2-allocconf.jsonl", "results/2026-11-26-h200x4-allocconf-heldout2.jsonl", 5, 4},
		// Expert parallelism (train.py --ep, 2 and 4 GPUs; three MoE
		// families; DDP and FSDP2), memplan given the busiest share of
		// routed rows each run measured: every set of the ninth session.
		{"expert parallelism", "results/2026-11-26-h200x4-ep.jsonl results/2026-11-26-h200x4-ep-2.jsonl results/2026-11-26-h200x4-ep-fsdp.jsonl",
			"results/2026-11-26-h200x4-ep*-heldout*.jsonl", 19, 16},
		// DDP, ZeRO-1 and FSDP2 on five families no earlier multi-GPU
		// run had (eleventh session, 2 x H100; predictions committed
		// first: results/2026-11-26-families*-heldout-predictions.txt).
		// The pattern takes families-heldout and families-fsdp-heldout;
		// the no-pause families-race-heldout is TestRaceHeldOut's.
		{"new families, 2xH100", "", "results/2026-11-26-famil*[sp]-heldout-h100x2.jsonl", 0, 9},
		// Gemma (full training and LoRA) and RoBERTa (LoRA) after their
		// modelling changed (twelfth session, 2 x H100; predictions
		// committed first: results/2026-11-26-gemma-bert-heldout-predictions.txt).
		{"Gemma and RoBERTa, 2xH100", "", "results/2026-11-26-gemma-bert-heldout-h100x2.jsonl", 0, 4},
		// The twenty-second session's new families under real NCCL:
		// SmolLM3 under FSDP2, StarCoder2 under DDP, Phi under ZeRO-1
		// (2 x H200; predictions committed first:
		// results/2026-11-27-families-22-dist-predictions.txt).
		{"new families, 22nd session, 2xH200", "", "results/2026-11-27-h200x2-families-22-heldout.jsonl", 0, 3},
		// GPT-OSS under real NCCL (twenty-third session): FSDP2 in AMP and
		// with MixedPrecisionPolicy, DDP in bf16 (2 x H200; predictions
		// committed first: results/2026-11-27-gptoss-dist-predictions.txt).
		{"GPT-OSS, 2xH200", "", "results/2026-11-27-h200x2-gptoss-heldout.jsonl", 0, 3},
		// gpt-oss-20b itself under FSDP2 on four GPUs, with and without
		// expandable_segments (twenty-third session, 4 x H200;
		// predictions committed first:
		// results/2026-11-27-gptoss-20b-dist-predictions.txt).
		{"gpt-oss-20b, 4xH200", "", "results/2026-11-27-h200x4-gptoss-20b-heldout.jsonl", 0, 2},
		// DeepSeek-V3 (Moonlight's cut) under FSDP2 and DDP (twenty-third
		// session, 2 x H200; predictions committed first:
		// results/2026-11-27-deepseek-dist-predictions.txt).
		{"DeepSeek-V3, 2xH200", "", "results/2026-11-27-h200x2-deepseek-heldout.jsonl", 0, 2},
		// DeepSeek-V2 under FSDP2 (fsdp-bf16) and DDP, and LoRA over its
		// fused experts under DDP (twenty-fourth session, 2 x H200;
		// predictions committed first:
		// results/2026-11-27-deepseek-v2-dist-predictions.txt).
		{"DeepSeek-V2, 2xH200", "", "results/2026-11-27-h200x2-deepseek-v2-heldout.jsonl", 0, 3},
		// DeepSeek-V2 and V3 under expert parallelism (twenty-fourth
		// session, 2 x H200; predictions committed first:
		// results/2026-11-27-deepseek-ep-predictions.txt).
		{"DeepSeek EP, 2xH200", "", "results/2026-11-27-h200x2-deepseek-ep-heldout.jsonl", 0, 4},
		// GPT-OSS under expert parallelism, its experts' biases split with
		// them (twenty-fourth session, 2 x H200; predictions committed
		// first: results/2026-11-27-gptoss-ep-predictions.txt).
		{"GPT-OSS EP, 2xH200", "", "results/2026-11-27-h200x2-gptoss-ep-heldout.jsonl", 0, 3},
		// LoRA over fused experts (peft's ParamWrapper) under ZeRO-1 and
		// DDP (twenty-fourth session, 2 x H200; predictions committed
		// first: results/2026-11-27-fused-lora-dist-predictions.txt).
		{"fused-expert LoRA, 2xH200", "", "results/2026-11-27-h200x2-fused-lora-heldout.jsonl", 0, 2},
		// GLM-4 MoE under FSDP2 (fsdp-bf16) and DDP (twenty-fifth
		// session, 2 x H200 of a 4 x H200 host; predictions committed
		// first: results/2026-11-27-glm-dist-predictions.txt).
		{"GLM-4 MoE, 2xH200", "", "results/2026-11-27-h200x2-glm-heldout.jsonl", 0, 2},
		// Held-out set 30's data-parallel half (thirtieth session, 2 x
		// H200): DDP, ZeRO-1, FSDP2 with fsdp-bf16, LoRA under FSDP2 and
		// expert parallelism under FSDP2 on families these layouts had not
		// run (predictions committed first:
		// results/2026-11-28-heldout-30-predictions.txt).
		{"held-out set 30, 2xH200", "", "results/2026-11-28-h200x2-heldout-30/heldout-30-train.jsonl", 0, 5},
		// Held-out set 50's data-parallel half (thirty-third session, 2 x
		// H200): SmolLM3 under FSDP2 with fsdp-bf16, StarCoder2 under
		// ZeRO-1, Phi-3 under FSDP2 without resharding, Cohere under DDP,
		// Llama 4's test shape under FSDP2 with fsdp-bf16 (predictions
		// committed first: results/2026-11-28-heldout-50-predictions.txt).
		{"held-out set 50, 2xH200", "", "results/2026-11-28-h200x2-heldout-50/heldout-50-train.jsonl", 0, 5},
		// Held-out set 52's data-parallel line (thirty-fourth session, 2 x
		// H200): TinyLlama under DDP in bf16, checkpointed, chosen after
		// cuBLAS's room was modelled (predictions committed first:
		// results/2026-11-28-heldout52-dist-predictions.txt).
		{"held-out set 52, 2xH200", "", "results/2026-11-28-h200x2-heldout-52/heldout-52-train.jsonl", 0, 1},
		// Held-out set 53's data-parallel lines (thirty-fourth session, 2 x
		// H200): Qwen3-0.6B under DDP, OLMo-1B under ZeRO-1, chosen after
		// NCCL's chunks were modelled (predictions committed first:
		// results/2026-11-28-heldout53-dist-predictions.txt).
		{"held-out set 53, 2xH200", "", "results/2026-11-28-h200x2-heldout-53/heldout-53-train.jsonl", 0, 2},
		// Held-out set 60's data-parallel lines (thirty-seventh session, 4
		// x H200): Llama 4's test shape and SmolLM3-3B (materialised from
		// the meta device) under FSDP2 with fsdp-bf16, Gemma-2-2B under
		// ZeRO-1, Qwen3-0.6B under FSDP2 without resharding, OLMo-2-1B
		// under DDP (predictions committed first:
		// results/2026-11-28-heldout60-dist-predictions.txt).
		{"held-out set 60, 4xH200", "", "results/2026-11-28-h200x4-heldout-60/heldout-60-train.jsonl", 0, 5},
		// Llama 4 under FSDP2 (bf16; AMP, checkpointed) and DDP (thirty-
		// first session, 2 x H200; predictions committed first:
		// results/2026-11-28-llama4-dist-predictions.txt).
		{"Llama 4, 2xH200", "", "results/2026-11-28-h200x2-llama4-heldout.jsonl", 0, 3},
		// FSDP2 over more ranks than a block has experts (thirty-first
		// session, 2 x H200; predictions committed first:
		// results/2026-11-28-padded-experts-predictions.txt; blind the
		// one-expert line was −9.9% allocated, each rank's expert shard
		// taken as half an expert until estimate.padShard split a single
		// expert along its own dimension).
		{"padded expert shards, 2xH200", "", "results/2026-11-28-h200x2-padded-experts.jsonl", 0, 2},
		// FSDP2's fused experts along their second dimension
		// (fsdp_experts dim1 and auto; thirty-second session, 2 x H200;
		// predictions committed first:
		// results/2026-11-28-fsdp-experts{,-heldout-2}-predictions.txt).
		{"experts along dim 1, 2xH200", "results/2026-11-28-h200x2-fsdp-experts/fsdp-experts.jsonl",
			"results/2026-11-28-h200x2-fsdp-experts/fsdp-experts-heldout.jsonl", 2, 2},
		{"experts along dim 1, 4xH200", "results/2026-11-28-h200x4-fsdp-experts/fsdp-experts.jsonl",
			"results/2026-11-28-h200x4-fsdp-experts/fsdp-experts-heldout.jsonl", 2, 2},
		// Gradient accumulation (thirty-eighth session): held-out set 64's
		// data-parallel lines, the planner's first layouts, from which DDP's
		// rebuild at the second micro-batch was modelled (estimate's
		// racesMidStep; +5.7% and +8.7% allocated blind before it), so
		// tuning; set 65, chosen and predicted after it, held out.
		{"gradient accumulation, 4xH200", "results/2026-11-28-h200x4-heldout-64/heldout-64-train.jsonl",
			"results/2026-11-28-h200x4-*/heldout-65-train*.jsonl", 6, 6},
		// The planner's first layout for TinyLlama at 32,768 tokens on two
		// GPUs (held-out set 67, thirty-eighth session).
		{"held-out set 67, 2xH200", "", "results/2026-11-28-h200x2-heldout-67/heldout-67-train.jsonl", 0, 1},
		// The planner's first data-parallel layouts for gemma-2-2b and
		// Phi-3-mini on four GPUs (held-out set 68, thirty-ninth session).
		{"held-out set 68, 4xH200", "", "results/2026-11-28-h200x4-heldout-68/heldout-68-train.jsonl", 0, 5},
		// The planner's first data-parallel layouts for Granite-3.1-2B and
		// SmolLM3-3B on two GPUs (held-out set 75, fortieth session; the
		// machine went before its other three lines ran).
		{"held-out set 75, 2xH200", "", "results/2026-11-29-h200x2-heldout-75/heldout-75-train.jsonl", 0, 3},
		// FSDP2 over 16 to 128 ranks, rank 0 alone on one H200 over a
		// fake process group, built on the meta device (forty-fourth
		// session): replicas of three real runs (fake-check-train.txt,
		// tuning; each the real rank 0's peaks to the byte) and held-out
		// set 83, Llama-3-70B over 64 and 128 ranks among them
		// (predictions committed first:
		// results/2026-11-29-heldout83-fake-fsdp-predictions.txt).
		{"FSDP2 over 16-128 ranks, fake group, 1xH200", "results/2026-11-29-h200-fake-tp-81/fake-check-train.jsonl",
			"results/2026-11-29-h200-fake-tp-81/heldout-83.jsonl", 3, 5},
		// Held-out set 88 (forty-fifth session, one H200, fake group, the
		// model built on the meta device): whole mixtures of experts and
		// Gemma 2 27B's shape under FSDP2 over 16 to 64 ranks, predictions
		// committed first (results/2026-11-29-heldout88-fake-fsdp-predictions.txt);
		// three of its seven lines ran in that session (Mixtral's over 16
		// was killed by the host, the rest not reached), the other four in
		// the forty-sixth (results/2026-11-29-h200-fake-46/; gpt-oss-120b's
		// in eager attention, which memplan predicts for it unasked).
		// Blind, Mixtral-8x7B's 8 experts over 16 ranks were -12.0%
		// allocated: FSDP2's padded shards and unsharded storages, modelled
		// since (estimate's shapedParam and unshard).
		{"FSDP2 over 16-64 ranks of whole MoE models, fake group, 1xH200", "",
			"results/2026-11-29-h200-fake-4[56]/heldout-88*.jsonl", 0, 7},
		// Held-out set 89 (forty-sixth session, one H200, fake group):
		// FSDP2 where rows do not divide over the ranks (experts fewer than
		// the ranks, GPT-2 XL's vocabulary over 64), chosen after the
		// padded shards were modelled, predictions committed first
		// (results/2026-11-29-heldout89-fake-fsdp-predictions.txt).
		{"FSDP2 with padded shards over 32-128 ranks, fake group, 1xH200", "",
			"results/2026-11-29-h200-fake-46/heldout-89.jsonl", 0, 6},
		// Held-out set 90 (forty-sixth session, one H200, fake group):
		// FSDP2 with LoRA, gradient accumulation, expandable segments,
		// Gemma 3 and DeepSeek-V3's shape over 16 to 128 ranks, predictions
		// committed first (results/2026-11-29-heldout90-fake-fsdp-predictions.txt).
		{"FSDP2 with LoRA, accumulation, expandable segments over 16-128 ranks, fake group, 1xH200", "",
			"results/2026-11-29-h200-fake-46/heldout-90.jsonl", 0, 6},
		// Held-out set 91 (forty-sixth session, one H200, fake group): the
		// fixes tune gives where FSDP2 pads experts, with the experts along
		// their second dimension, predictions committed first
		// (results/2026-11-29-heldout91-fake-fsdp-predictions.txt); blind
		// -1.0% allocated at worst, before the dim-1 copies were modelled.
		{"FSDP2 with experts along dim 1 over 16-128 ranks, fake group, 1xH200", "",
			"results/2026-11-29-h200-fake-46/heldout-91.jsonl", 0, 4},
		// Held-out set 92 (forty-sixth session's choice, run in the
		// forty-seventh, one H200, fake group): expandable segments,
		// max_split_size_mb, AMP, eager attention, no resharding under
		// accumulation, the cache kept; OLMo-2's line again in pure bf16
		// (heldout-92b), its bf16-policy checkpointed run failing in the
		// harness. Predictions committed first
		// (results/2026-11-29-heldout92-fake-fsdp-predictions.txt); blind
		// -2.3% reserved on Phi-3 before inputs_embeds was held.
		{"FSDP2 under allocator settings, AMP, accumulation over 16-128 ranks, fake group, 1xH200", "",
			"results/2026-11-29-h200-fake-47/heldout-92*.jsonl", 0, 6},
		// FSDP2's reshard_after_forward=N (forty-seventh session, one
		// H200, fake group): the tuning lines it was simulated from
		// (trace-47) and held-out set 93, predictions committed first
		// (results/2026-11-29-heldout93-fake-fsdp-predictions.txt).
		// trace-47b: OLMo 2 and 3 under FSDP2's bf16 policy, its cast of
		// their fp32 rotary tables (tuning).
		{"FSDP2 resharded to N ranks over 16-64 ranks, fake group, 1xH200",
			"results/2026-11-29-h200-fake-47/trace-47.jsonl results/2026-11-29-h200-fake-47/trace-47b.jsonl",
			"results/2026-11-29-h200-fake-47/heldout-93.jsonl", 7, 7},
		// Held-out set 94: tune's answers with ZeRO 3 resharded to a
		// node's 8 GPUs, run at the batch tune chose (Llama-3-70B over
		// 32, Llama-3-8B over 16), and DeepSeek-V2-Lite over 32;
		// predictions committed first
		// (results/2026-11-29-heldout94-fake-fsdp-predictions.txt).
		{"tune's answers resharded to 8 over 16-32 ranks, fake group, 1xH200", "",
			"results/2026-11-29-h200-fake-47/heldout-94.jsonl", 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tuning := strings.Fields(tc.tuning)
			held, err := filepath.Glob(tc.heldOut)
			if err != nil || len(held) == 0 {
				t.Fatalf("held-out files %q: %v", tc.heldOut, err)
			}
			rep, err := Compare("..", tuning, held)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Tuning.N < tc.minTuning || rep.HeldOut.N < tc.minHO {
				t.Fatalf("%d tuning and %d held-out configurations; want %d and %d", rep.Tuning.N, rep.HeldOut.N, tc.minTuning, tc.minHO)
			}
			checkMultiGPU(t, rep, under)
		})
	}
	for label, ms := range multiGPUGaps {
		for _, m := range ms {
			if !under[gapKey{label, m}] {
				t.Errorf("%s: %s is no longer more than %.0f%% under in any set: remove it from multiGPUGaps",
					label, MetricNames[m], 100*UnderLimit)
			}
		}
	}
}

// gapKey is one metric of one configuration.
type gapKey struct {
	label  string
	metric int
}

// checkMultiGPU holds one multi-GPU comparison to issue 12's targets and
// marks in under the listed gaps it found still under.
func checkMultiGPU(t *testing.T, rep *Report, under map[gapKey]bool) {
	t.Helper()
	median, worst := distTargets.Median, distTargets.Worst
	for name, s := range map[string]Summary{"tuning": rep.Tuning, "held-out": rep.HeldOut} {
		for m := 0; m < NumMetrics; m++ {
			if s.Median[m] > median[m] {
				t.Errorf("%s: %s median error %.2f%%, target %.0f%%", name, MetricNames[m], 100*s.Median[m], 100*median[m])
			}
		}
	}
	for _, r := range rep.Rows {
		for m := 0; m < NumMetrics; m++ {
			e := r.Err[m]
			known := false
			label := strings.TrimSpace(strings.TrimSuffix(r.Label, "--snapshot"))
			for _, x := range multiGPUGaps[label] {
				known = known || x == m
			}
			over := false
			for _, x := range multiGPUOver[label] {
				over = over || (x == m && e > 0)
			}
			if (abs(e) > worst[m] && !over) || (e < -UnderLimit && !known) {
				t.Errorf("%s: %s error %+.1f%%", r.Label, MetricNames[m], 100*e)
			}
			if known && e < -UnderLimit {
				under[gapKey{label, m}] = true
			}
		}
	}
}

// TestRaceHeldOut holds memplan's default for DDP and ZeRO-1 with no pause
// between steps, which keeps the old flat bucket past DDP's rebuild
// (docs/multigpu.md, "DDP's bucket rebuild race"), to what the held-out
// no-pause set measured (train.py --no-pause, predictions committed first):
// never under, and within the targets where a rank raced. Where no rank
// raced memplan is over by the bucket, up to 20% (listed here).
func TestRaceHeldOut(t *testing.T) {
	// The lines on which a rank raced (the eleventh session's set on three
	// new families: BERT and Pythia raced, Qwen2.5's ZeRO-1 did not).
	raced := map[string]bool{
		"specs/tinyllama-1.1b.yaml --mode ddp --batch 2 --seq 2048 --precision amp-bf16 --checkpointing every-block --no-pause": true,
		"specs/bert-base.yaml --mode ddp --batch 16 --seq 512 --precision amp-bf16 --no-pause":                                  true,
		"model/testdata/hf/pythia-160m.json --mode ddp --batch 8 --seq 1024 --precision amp-bf16 --no-pause":                    true,
	}
	rep, err := Compare("..", nil, []string{"results/2026-11-26-race-heldout-h100x2.jsonl", "results/2026-11-26-families-race-heldout-h100x2.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.HeldOut.N != 8 {
		t.Fatalf("%d held-out configurations, want 8", rep.HeldOut.N)
	}
	worst := distTargets.Worst
	found := 0
	for _, r := range rep.Rows {
		if raced[r.Label] {
			found++
		}
		for m := 0; m < NumMetrics; m++ {
			e := r.Err[m]
			if e < -UnderLimit {
				t.Errorf("%s: %s %+.1f%%, under", r.Label, MetricNames[m], 100*e)
			}
			if raced[r.Label] && abs(e) > worst[m] {
				t.Errorf("%s (a rank raced): %s %+.1f%%", r.Label, MetricNames[m], 100*e)
			}
		}
		t.Logf("%s: %+.1f%% %+.1f%% %+.1f%%", r.Label, 100*r.Err[Allocated], 100*r.Err[Reserved], 100*r.Err[Device])
	}
	if found != len(raced) {
		t.Errorf("%d of the %d lines that raced found by label", found, len(raced))
	}
}

// TestFakeGroupDevice checks that Compare leaves NCCL out of the device
// total it compares with a record of measure.py's fake process group (one
// rank of dp > 1, no communicator), and that a single-GPU record's is the
// estimate's own (records of real multi-GPU runs, world > 1, keep NCCL:
// TestMultiGPUAccuracy).
func TestFakeGroupDevice(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, recs ...map[string]any) string {
		var b []byte
		for _, r := range recs {
			line, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			b = append(append(b, line...), '\n')
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := func(label string, dp int) map[string]any {
		return map[string]any{"spec": "specs/gpt2-124m.yaml", "label": label, "ok": true,
			"training":             map[string]any{"batch": 2, "seq": 256, "precision": "amp-bf16", "dp": dp, "zero": 1},
			"peak_allocated_bytes": 1 << 30, "peak_reserved_bytes": 1 << 30, "device_total_used_bytes": 1 << 30}
	}
	f := write("r.jsonl", rec("fake", 2), rec("one", 1))
	rep, err := Compare("..", []string{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rep.Rows {
		o := model.Overrides{Batch: 2, Seq: 256, Precision: "amp-bf16", Zero: "1"}
		if row.Label == "fake" {
			o.DP, o.StepPause, o.FSDPInit, o.EmptyCacheAfterWrap = 2, settledPause, model.FSDPInitGPU, true
		}
		spec, err := model.Load("../specs/gpt2-124m.yaml", o)
		if err != nil {
			t.Fatal(err)
		}
		e, err := estimate.Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		want := e.DeviceTotal
		if row.Label == "fake" {
			if e.NCCLBytes() == 0 {
				t.Fatal("dp 2 has no NCCL item to leave out")
			}
			want -= e.NCCLBytes()
		}
		if got := row.Predicted[Device]; got != want {
			t.Errorf("%s: compared device total %d, want %d", row.Label, got, want)
		}
	}
}

// TestHSDPOverrides: train.py --replicate R is memplan's --dp-replicate R,
// and an integer reshard_after_forward counts within an HSDP group.
func TestHSDPOverrides(t *testing.T) {
	r := Record{Mode: "fsdp", Reshard: "4", World: 32, Replicate: 4}
	o := r.Overrides()
	if o.DP != 32 || o.Zero != "3" || o.DPReplicate != 4 || o.ReshardAfterForward != 4 {
		t.Errorf("HSDP record: dp %d zero %q dp_replicate %d reshard_after_forward %d, want 32 3 4 4", o.DP, o.Zero, o.DPReplicate, o.ReshardAfterForward)
	}
	r.Reshard = "8" // the group's 8 GPUs: True
	if o := r.Overrides(); o.ReshardAfterForward != 0 {
		t.Errorf("reshard 8 over groups of 8: reshard_after_forward %d, want 0", o.ReshardAfterForward)
	}
}

package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// tpRecord is one line of bench/torch/dist/common.report (tp.py, pp.py,
// cp.py): the configuration and every rank's peaks, per step and at the
// end.
type tpRecord struct {
	Label  string `json:"label"`
	OK     bool   `json:"ok"`
	GPU    string `json:"gpu"` // as nvidia-smi names it
	Config struct {
		Script       string `json:"script"`
		Spec         string `json:"spec"`
		TP           int64  `json:"tp"`
		CP           int64  `json:"cp"`
		DP           int64  `json:"dp"`
		SP           bool   `json:"sp"`
		LossParallel bool   `json:"loss_parallel"`
		Batch, Seq   int64
		// GradAccum is tp.py's and cp.py's --grad-accum: micro-batches
		// per optimizer step outside a pipeline (0 or 1: none).
		GradAccum     int64  `json:"grad_accum"`
		Checkpointing string `json:"checkpointing"`
		// Pipelines (pp.py): stages, schedule, micro-batches and stages
		// per rank.
		PP           int64  `json:"pp"`
		Schedule     string `json:"schedule"`
		Microbatches int64  `json:"microbatches"`
		Virtual      int64  `json:"virtual"`
		// Mode is pp.py's data parallelism over the stages' replicas
		// (--dp): ddp, zero1 or fsdp; tp.py's over the tensor-parallel
		// groups (absent in its records before the thirty-eighth
		// session: fsdp).
		Mode string `json:"mode"`
		// FSDP is cp.py's --fsdp: FSDP2 over dp·cp (built on the GPU).
		FSDP bool `json:"fsdp"`
		// Meta is tp.py's --meta: the model built on the meta device,
		// split and sharded there, then materialised (not on the GPU
		// first).
		Meta bool `json:"meta"`
		// Reshard is tp.py's --reshard: the blocks' reshard_after_forward=N
		// under FSDP (0: torch's default).
		Reshard int64 `json:"reshard"`
		// StepPause is pp.py's --step-pause: seconds slept after the
		// first optimizer step (0: none).
		StepPause float64 `json:"step_pause"`
		// EP is pp.py's --ep over each stage's replicas, Router its
		// routers (zero: one rank of a group receives every pair).
		EP     int64  `json:"ep"`
		Router string `json:"router"`
		// RecvRowsMax is the most rows one rank received in a block's
		// dispatch and the balanced count, when recorded (cp.py --ep;
		// pp.py's first EP records lack it).
		RecvRowsMax []int64 `json:"recv_rows_max"`
		// FakeWorld is the world size of a run made one rank at a time
		// on one GPU over torch's fake process group (common.py's
		// MEMPLAN_FAKE_WORLD, tp-run.sh's F=R lines), FakeRank the rank
		// it ran (0: a real torchrun job).
		FakeWorld int64 `json:"fake_world"`
		FakeRank  int64 `json:"fake_rank"`
	} `json:"config"`
	Ranks []struct {
		Rank  int64     `json:"rank"`
		Steps []tpPeaks `json:"steps"`
		tpPeaks
	} `json:"ranks"`
}

// dev is memplan's name for the device the run used (deviceNamed), or an
// H200's for a record that names none (the first ones, all run on H200s).
func (r *tpRecord) dev() string {
	if d := deviceNamed(r.GPU); d != "" {
		return d
	}
	return "h200-141gb"
}

// steps is the optimizer steps the run took (its ranks' lists of
// per-step peaks), the run's length for a prediction of a run that leaks
// (model.Training.Steps), or 0 for a record without them.
func (r *tpRecord) steps() int64 {
	var n int
	for _, rk := range r.Ranks {
		n = max(n, len(rk.Steps))
	}
	return int64(n)
}

type tpPeaks struct {
	Allocated int64 `json:"peak_allocated"`
	Reserved  int64 `json:"peak_reserved"`
	Device    int64 `json:"device_used"`
}

// measured is, per metric, the largest over the ranks and the steps.
func (r *tpRecord) measured() (m [NumMetrics]int64) {
	for _, rk := range r.Ranks {
		for _, p := range append(rk.Steps, rk.tpPeaks) {
			m[Allocated] = max(m[Allocated], p.Allocated)
			m[Reserved] = max(m[Reserved], p.Reserved)
			m[Device] = max(m[Device], p.Device)
		}
	}
	return m
}

// TestTensorParallelAccuracy holds memplan's predictions for the
// tensor-parallel runs of bench/torch/dist/tp-grid.txt on two H200s and,
// with FSDP2 over a dp × tp mesh, on four (tp.py: torchtitan's plan, AdamW
// foreach, amp-bf16; with the 4-GPU line of tp-heldout.txt and the TP
// lines of grid-4-layouts.txt and heldout-4-layouts.txt, measured after
// their predictions were committed; and a mixture of experts split by
// columns, grid-tp-moe.txt and heldout-tp-moe.txt, on four H100s and four
// H200s, and with its experts split over ranks instead (expert
// parallelism beside TP), grid-tp-ep.txt and heldout-tp-ep.txt on four
// H200s, each measured after its predictions were committed:
// bench/results/2026-11-27-tp-moe-predictions.txt, -tp-ep-predictions.txt,
// and a second held-out set of both, heldout-tp-ep-2.txt,
// -tp-ep-2-predictions.txt; and models built on the meta device, tp.py
// --meta, heldout-tp-meta.txt, -tp-meta-predictions.txt; and transformers'
// own GPT-OSS, GLM-4 MoE, DeepSeek-V2 and V3 and Moonlight without sequence
// parallelism, tp.py on a .json with hftp.py's plan, grid-tp-hf.txt and
// grid-tp-hf-2.txt, held out heldout-tp-hf.txt and heldout-tp-hf-2.txt,
// -tp-hf-predictions.txt and -tp-hf-2-predictions.txt; and the same with
// sequence parallelism, grid-tp-hf-sp.txt, heldout-tp-hf-sp.txt, and with
// expert parallelism beside it, grid-tp-hf-ep.txt, heldout-tp-hf-ep.txt,
// -tp-hf-sp-, -tp-hf-sp-heldout-, -tp-hf-ep- and
// -tp-hf-ep-heldout-predictions.txt; and Gemma 3, grid-tp-gemma3.txt,
// heldout-tp-gemma3.txt on four H100s, heldout-tp-gemma3-2.txt on four
// H200s, Gemma 2, grid-tp-gemma2.txt, heldout-tp-gemma2.txt, and Granite and
// SmolLM3, grid- and heldout-tp-granite-smollm3.txt, and StarCoder2, Cohere
// and Phi-3 on two H200s, grid- and heldout-tp-families.txt, with Phi-3's
// traced line, and OLMo 2 and 3 on two H100s, grid- and
// heldout-tp-olmo2.txt, with a traced line, and OLMo, grid- and
// heldout-tp-olmo.txt, with two held-out family lines traced,
// trace-tp-families.txt; and held-out set 28 on four H200s, heldout-28.txt,
// its StarCoder2 line traced, and the second set after the last change on
// two H100s, heldout-28b.txt; held-out sets 29, 30 and 30c, and the
// thirtieth session's runs with the harness rotating by fp32 tables,
// trace-rope-fp32.txt; and Llama 4 on two H200s, grid- and
// heldout-tp-llama4.txt, its sequence-parallel lines run again after a
// harness fix, rerun-tp-llama4-sp.txt (tpReruns), two lines traced,
// trace-tp-llama4.txt; and held-out set 49, checkpointed lines across the
// families on two H200s, heldout-49.txt, and held-out set 50's
// tensor-parallel lines, heldout-50.txt, and set 52's, heldout-52.txt;
// and, one rank at a time on one H200 over a fake process group, replicas
// of six of those runs, fake-check.txt, held-out set 81 at tp 8,
// heldout-81.txt, TestFakeGroupReplicas, and set 84's transformers
// configs, heldout-84.txt; the forty-fifth session's set 86, heldout-86.txt,
// and the tp line of trace-86.txt) to issue 12's multi-GPU targets: medians
// within 2% (allocated) and 3% (reserved, device), worst within 6% and 8%,
// nothing more than UnderLimit under.
func TestTensorParallelAccuracy(t *testing.T) {
	var errs [NumMetrics][]float64
	var runs []tpRecord
	for _, f := range []string{"2026-11-23-h200x2-tp.jsonl", "2026-11-26-h200x4-tp.jsonl", "2026-11-26-h200x4-tp-heldout.jsonl",
		"2026-11-26-h200x4-layouts.jsonl", "2026-11-26-h200x4-layouts-heldout.jsonl",
		"2026-11-27-tp-moe-h100x4.jsonl", "2026-11-27-tp-moe-heldout-h200x4.jsonl",
		"2026-11-27-tp-ep-h200x4.jsonl", "2026-11-27-tp-ep-heldout-h200x4.jsonl",
		"2026-11-27-tp-ep-heldout-2-h200x4.jsonl", "2026-11-27-tp-meta-heldout-h100x4.jsonl",
		"2026-11-27-h200x4-tp-hf/tp-hf.jsonl", "2026-11-27-h200x4-tp-hf/tp-hf-heldout.jsonl",
		"2026-11-27-h200x4-tp-hf/tp-hf-2.jsonl", "2026-11-27-h200x4-tp-hf/tp-hf-2-heldout.jsonl",
		"2026-11-27-h200x4-tp-hf/tp-hf-3-heldout.jsonl", "2026-11-27-h200x4-tp-hf/x2-heldout.jsonl",
		"2026-11-27-h200x4-tp-hf/tp-hf-4-heldout-h100x4.jsonl",
		"2026-11-27-h200x4-tp-hf-sp/tp-hf-sp.jsonl", "2026-11-27-h200x4-tp-hf-sp/tp-hf-sp-heldout.jsonl",
		"2026-11-27-h200x4-tp-hf-sp/tp-hf-ep.jsonl", "2026-11-27-h200x4-tp-hf-sp/tp-hf-ep-heldout.jsonl",
		"2026-11-27-h100x4-tp-gemma3/tp-gemma3.jsonl", "2026-11-27-h100x4-tp-gemma3/tp-gemma3-heldout.jsonl",
		"2026-11-27-h100x4-tp-gemma3/tp-gemma3-heldout-2-h200x4.jsonl",
		"2026-11-27-h100x4-tp-gemma3/tp-gemma2-h200x4.jsonl", "2026-11-27-h100x4-tp-gemma3/tp-gemma2-heldout-h200x4.jsonl",
		"2026-11-27-h100x4-tp-gemma3/tp-granite-smollm3-h200x4.jsonl",
		"2026-11-27-h100x4-tp-gemma3/tp-granite-smollm3-heldout-h200x4.jsonl",
		"2026-11-27-h200x2-tp-families/tp-families.jsonl", "2026-11-27-h200x2-tp-families/tp-families-heldout.jsonl",
		"2026-11-27-h200x2-tp-families/cohere-6steps.jsonl", // the leak over six steps (Training.Steps)
		"2026-11-27-h200x2-phi3-traces/tp-runs.jsonl",
		"2026-11-27-h100x2-tp-olmo2/tp-olmo2.jsonl", "2026-11-27-h100x2-tp-olmo2/trace-olmo2.jsonl",
		"2026-11-27-h100x2-tp-olmo2/tp-olmo2-heldout.jsonl",
		"2026-11-27-h200x2-tp-families/tp-olmo.jsonl", "2026-11-27-h200x2-tp-families/tp-olmo-heldout.jsonl",
		"2026-11-27-h200x2-tp-families/trace-families.jsonl",
		"2026-11-27-h200x4-heldout-28/heldout-28.jsonl", "2026-11-27-h200x4-heldout-28/trace-starcoder2.jsonl",
		"2026-11-27-h100x2-heldout-28b/heldout-28b.jsonl", "2026-11-28-h100x4-tp-gaps-traces/trace-tp-gaps.jsonl",
		"2026-11-28-h100x4-heldout-29/heldout-29.jsonl", "2026-11-28-h200x2-heldout-30/heldout-30.jsonl",
		"2026-11-28-h200x2-rope-fp32/rope.jsonl", "2026-11-28-h200x2-heldout-30c/heldout-30c.jsonl",
		"2026-11-28-h200x2-tp-llama4/tp-llama4.jsonl", "2026-11-28-h200x2-tp-llama4/tp-llama4-heldout.jsonl",
		"2026-11-28-h200x2-tp-llama4/rerun-sp.jsonl", "2026-11-28-h200x2-tp-llama4/trace.jsonl",
		"2026-11-28-h200x2-heldout-49/heldout-49.jsonl", "2026-11-28-h200x2-heldout-50/heldout-50.jsonl",
		"2026-11-28-h200x2-heldout-52/heldout-52.jsonl", "2026-11-28-h200x4-heldout54.jsonl",
		"2026-11-28-h200x4-heldout-64/heldout-64.jsonl", "2026-11-28-h200x4-heldout-66/heldout-66.jsonl",
		"2026-11-28-h200x2-heldout-58/heldout-58.jsonl", "2026-11-28-h200x4-heldout-60/layouts.jsonl",
		"2026-11-28-h200x4-heldout-68/heldout-68.jsonl",
		"2026-11-28-h200x2-heldout-71/heldout-71.jsonl", "2026-11-28-h200x2-heldout-71/trace-maverick.jsonl",
		"2026-11-28-h200x2-heldout-74/heldout-74.jsonl", "2026-11-28-h200x2-trace-74/trace-74.jsonl",
		"2026-11-29-h200x2-heldout-75/heldout-75.jsonl",
		"2026-11-29-h200-fake-tp-81/fake-check.jsonl", "2026-11-29-h200-fake-tp-81/heldout-81.jsonl",
		"2026-11-29-h200-fake-tp-81/heldout-84.jsonl",
		"2026-11-29-h200-fake-45/heldout-86.jsonl", "2026-11-29-h200-fake-45/trace-86.jsonl",
		"2026-11-29-h200x2-heldout-77/heldout-77a.jsonl", "2026-11-29-h200x2-heldout-77/heldout-77b.jsonl",
		"2026-11-29-h200x2-heldout-77/heldout-77c.jsonl"} {
		runs = append(runs, withoutReruns(t, f, readScript(t, filepath.Join("results", f), "tp"))...)
	}
	for _, r := range runs {
		c := r.Config
		o := model.Overrides{Batch: c.Batch, Seq: c.Seq, Precision: model.AMPBF16, Optimizer: model.AdamW,
			Checkpointing: c.Checkpointing, TP: c.TP, SP: c.SP, LossParallel: c.LossParallel, Dev: r.dev(),
			GradAccum:           c.GradAccum,
			LossOutsideAutocast: true,              // tp.py's loss is outside autocast
			FSDPInit:            model.FSDPInitGPU} // and it builds the model whole on the GPU first
		switch {
		case c.DP > 1 && (c.Mode == "ddp" || c.Mode == "zero1"):
			// tp.py --mode: DDP over the tensor-parallel shards.
			o.DP, o.Zero = c.DP, map[string]string{"ddp": "0", "zero1": "1"}[c.Mode]
		case c.DP > 1:
			// fully_shard(model) without reshard_after_forward: torch
			// keeps the root unsharded after the forward.
			o.DP, o.Zero, o.FSDPRoot = c.DP, "3", model.FSDPRootKeep
			if c.Reshard > 1 && c.Reshard < c.DP {
				o.ReshardAfterForward = c.Reshard
			}
		}
		setEP(&o, c.EP, c.Router, c.RecvRowsMax) // tp.py --ep: the experts over dp·tp
		if c.Meta {
			o.FSDPInit = model.FSDPInitMeta
		}
		e := distErrors(t, r, o)
		under := false
		for k := 0; k < NumMetrics; k++ {
			errs[k] = append(errs[k], e[k])
			under = under || e[k] < -UnderLimit
			if e[k] < -UnderLimit && !tpGaps[r.Label][k] {
				t.Errorf("%s: %s %+.1f%%", r.Label, MetricNames[k], 100*e[k])
			}
		}
		if tpGaps[r.Label] != nil && !under {
			t.Errorf("%s is listed as a gap but is no longer more than %.0f%% under", r.Label, 100*UnderLimit)
		}
	}
	if n := len(errs[Allocated]); n != 231 {
		t.Fatalf("%d tensor-parallel runs, want 231", n)
	}
	checkSpread(t, errs)
}

// tpGaps are the tensor-parallel runs more than UnderLimit under, with the
// metrics that are.
//
// (The wide mixture of experts on two ranks, bench/torch/dist's
// moe-llama-wide.yaml, −3.8% reserved since the twenty-eighth session,
// and Llama 4's test shape at tp 2 × FSDP2 dp 2, held-out set 54, −3.9%
// blind, are −2.0% and +0.2% since the thirty-fifth simulates steps until
// one ends as the one before it did: each run's cache grew in its third
// step, which two simulated steps did not see; estimate's train,
// docs/allocator.md §8. The bisection of the second's history, which made
// its peak move between 6,052 and 6,552 MiB with small changes to the
// requests, was of two-step simulations.)
//
// (GPT-OSS's first eight layers at tp 4 without sp, checkpointed, listed
// from the twenty-ninth session at −3.1% to −3.7% reserved, is −0.5% since
// the thirty-ninth: its history, bench/results/2026-11-28-h100x4-tp-gaps-
// traces, wraps the attention's input once per projection and all-reduces
// each projection's share of its gradient into a new tensor, and holds the
// input until the output projection's all-reduce has its output, which
// memplan now simulates, estimate.fromLocalEach and collectiveOp.forward;
// docs/parallelism.md §3.1.8. The history replays to its own reserve with
// a chunk for NCCL's region in the address model, docs/allocator.md §8.)
//
// Llama 4's test shape at tp 2 × FSDP2 dp 2, meta-built, checkpointed
// (held-out set 54, −3.9% reserved blind, every rank alike): rank 0's
// history (bench/results/2026-11-28-h200x4-heldout54-traces, c6) replayed
// through memplan's allocator gives its 6,342 MiB to the MiB; memplan's own
// requests 6,096. Their requests of 60 MiB or more match one for one in
// the two steps memplan simulates, but for the order of frees within a run
// (which leaves the allocator in one state) and the root's last all-gather
// output, which the history frees before the loss (memplan since this
// session too: estimate.lossAfterAutocast). With the first 1, 2, … of the
// 219 stretches where the smaller requests differ replaced by the
// history's, the simulated peak goes back and forth between 6,052, 6,296,
// 6,308 and 6,552 MiB (bench/torch/bisect.py): one 256 MiB segment more
// or less, set by placement, not by any one tensor.
//
// (GPT-OSS's first four layers at tp 2 with sp, a batch of two,
// checkpointed, −3.1% reserved blind, is +0.0% since the same session's
// trace: a segment's tail gradients, the reduce-scatter's all-gather
// included, come before its recompute; estimate.tailGrads.)
//
// (Maverick's test shape at tp 2 without sp, checkpointed, a batch of
// two, listed at −3.8% reserved from the thirty-sixth session, is +0.0%
// since the fortieth: its rank 0 history, bench/results/2026-11-28-h200x2-
// heldout-71, replays through memplan's allocator to its 6,728 MiB, and
// bisected against memplan's (bench/torch/bisect.py) the third of its 24
// differing stretches moves the peak: the dense MLP's product, down_proj's
// input, freed after the output all-reduce's output exists, as
// down_proj's call holds its argument through RowwiseParallel's output
// hook; estimate's gatedMLPOp, TestMLPHoldsProduct.)
//
// SmolLM3-3B at tp 2 without sp, checkpointed, a batch of one (held-out set
// 74, −5.3% reserved blind, the same when traced): its rank 0 history
// (bench/results/2026-11-28-h200x2-trace-74, c1) replays through memplan's
// allocator to 35,872 MiB, memplan's own figure, and to the run's 37,872
// with the run's own segment addresses: in the run the forward's segments
// are carved upwards from the rooms NCCL's set-up leaves, which the
// address model opens only where DDP, FSDP2 or a pipeline brings a
// communicator up, not at a tensor-parallel program's first collective.
// Brought up there (the DTensor random tracker's broadcast), fourteen of
// seventeen tensor-parallel histories replay to their reserve, nine
// without; in the estimator it moved 37 of the 511 logged lines, 6 closer
// and 8 further, two Llama 4 sp lines to 3.7% under, whose own history
// follows the rule while memplan's requests differ from it in 229
// stretches (docs/allocator.md §8, fortieth session). Not kept; placement.
var tpGaps = map[string]map[int]bool{
	"tp.py 2 model/testdata/hf/smollm3-3b.json --tp 2 --no-sp --meta --seq 4096 --batch 1 --checkpointing every-block": {Reserved: true, Device: true},
}

// tpReruns maps a results file to the one that ran some of its lines again
// after a fix to the harness: Llama 4's sequence-parallel lines, first run
// while hftp.ExpertsTP reduce-scattered Llama4TextMoe's flattened output
// along its hidden width (an all-to-all the plan does not make, 450 MiB of
// NCCL's point-to-point buffers; bench/results/README.md, "Thirty-third
// session").
var tpReruns = map[string]string{
	"2026-11-28-h200x2-tp-llama4/tp-llama4.jsonl":         "2026-11-28-h200x2-tp-llama4/rerun-sp.jsonl",
	"2026-11-28-h200x2-tp-llama4/tp-llama4-heldout.jsonl": "2026-11-28-h200x2-tp-llama4/rerun-sp.jsonl",
}

// withoutReruns drops from rs, the records of results file f, those whose
// lines tpReruns' file ran again.
func withoutReruns(t *testing.T, f string, rs []tpRecord) []tpRecord {
	t.Helper()
	again, ok := tpReruns[f]
	if !ok {
		return rs
	}
	later := map[string]bool{}
	for _, r := range readScript(t, filepath.Join("results", again), "tp") {
		later[r.Label] = true
	}
	var out []tpRecord
	for _, r := range rs {
		if !later[r.Label] {
			out = append(out, r)
		}
	}
	return out
}

// setEP gives o a record's expert parallelism (cp.py and tp.py --ep): ep
// ranks; zeroed routers send one rank of each group every pair (skew ep),
// random routing is given the skew the run recorded (the most rows a rank
// received over the balanced count), as the expert-parallel tests give it.
func setEP(o *model.Overrides, ep int64, router string, recv []int64) {
	if ep <= 1 {
		return
	}
	o.EP = ep
	switch {
	case router == "zero":
		o.EPSkew = strconv.FormatInt(ep, 10)
	case len(recv) == 2:
		o.EPSkew = strconv.FormatFloat(float64(recv[0])/float64(recv[1]), 'f', 4, 64)
	}
}

// distTargets are the multi-GPU targets of issues 12 and 13, per metric
// (absolute relative error): medians within 2% (allocated) and 3%
// (reserved, device), worst within 6% and 8%.
var distTargets = struct{ Median, Worst [NumMetrics]float64 }{
	Median: [NumMetrics]float64{0.02, 0.03, 0.03},
	Worst:  [NumMetrics]float64{0.06, 0.08, 0.08},
}

// checkSpread holds errors (predicted / measured − 1, per metric) to
// distTargets.
func checkSpread(t *testing.T, errs [NumMetrics][]float64) {
	t.Helper()
	median, worst := distTargets.Median, distTargets.Worst
	for k := 0; k < NumMetrics; k++ {
		med, w := spreadOf(errs[k])
		if med > median[k] || w > worst[k] {
			t.Errorf("%s: median error %.2f%%, worst %.2f%%; targets %.0f%%, %.0f%%", MetricNames[k], 100*med, 100*w, 100*median[k], 100*worst[k])
		}
		t.Logf("%s: median %.2f%%, worst %.2f%% over %d runs", MetricNames[k], 100*med, 100*w, len(errs[k]))
	}
}

// spreadOf is the median and the largest of the absolute errors errs.
func spreadOf(errs []float64) (median, worst float64) {
	a := make([]float64, len(errs))
	for i, e := range errs {
		a[i] = abs(e)
	}
	sort.Float64s(a)
	return (a[(len(a)-1)/2] + a[len(a)/2]) / 2, a[len(a)-1]
}

// readScript returns the successful lines of a results file written by
// bench/torch/dist/common.report for one script ("tp", "pp" or "cp").
func readScript(t *testing.T, path, script string) []tpRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []tpRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r tpRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.OK && r.Config.Script == script {
			out = append(out, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// distErrors predicts run r's spec under o and returns the relative error
// of each metric against the busiest rank's measurement (for pipelines,
// the busiest kind of stage's prediction, metric by metric). With
// MEMPLAN_BENCH_LOG set it logs each run's errors (go test -v).
func distErrors(t *testing.T, r tpRecord, o model.Overrides) (e [NumMetrics]float64) {
	t.Helper()
	load := model.Load
	if strings.HasSuffix(r.Config.Spec, ".json") {
		load = model.LoadHF // a transformers config (pp.py's HFStage)
	}
	if o.Steps == 0 {
		o.Steps = r.steps() // a leak counts over the run's own steps, and no more are simulated
	}
	spec, err := load(filepath.Join("..", r.Config.Spec), o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := estimate.Estimate(spec)
	if err != nil {
		t.Fatal(err)
	}
	m := r.measured()
	pred := predicted(p, r.Config.FakeWorld > 0)
	for k := range e {
		e[k] = float64(pred[k])/float64(m[k]) - 1
	}
	if os.Getenv("MEMPLAN_BENCH_LOG") != "" {
		// One line per run, to set two trees' figures side by side.
		t.Logf("run %s: %+.2f%% %+.2f%% %+.2f%%", r.Label, 100*e[0], 100*e[1], 100*e[2])
	}
	return e
}

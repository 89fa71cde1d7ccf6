package bench

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// pipelineGaps are the pipeline runs more than UnderLimit under, with what
// is known of them (docs/parallelism.md §3.2.4). (TinyLlama's held-out
// ZeRO-1 line, −3.4% through the address model of the thirty-second
// session, is −0.8% since the thirty-fourth's: NCCL's chunks and the
// context's reservation as a chunk of its own.) A listed run that is no
// longer under fails the test, so the list stays true. (TinyLlama's GPipe of
// eight micro-batches, −4.8% reserved while two steps were simulated, its
// last stage's reserve still growing in the third, is −1.2% since a
// pipeline whose second step maps more simulates a third, as train does.)
var pipelineGaps = map[string][]int{
	// Since the shape inference's zeros live until _shape_inference
	// returns (thirty-second session; every traced later stage frees them
	// there), these runs' caches land lower than PyTorch's. Replayed with
	// the histories' own segment addresses memplan's allocator gives each
	// traced rank's reserve to the MiB
	// (bench/results/2026-11-28-h200x4-shape-inference-traces,
	// -pp-llama4-traces; alloc's TestReplayDebug with MEMPLAN_REPLAY_ADDR):
	// what is left is the order the driver gave the segments, and requests
	// that differ from PyTorch's in small ways whose effect on placement
	// grows (bench/torch/bisect.py).
	// Qwen's tied interleaved pipeline: rank 3's history through memplan's
	// address model gives its 20,060 MiB; memplan's own requests 18,866.
	// bisect.py's stretch that moves the peak is the rotary embedding's
	// backward, in fp32 in memplan's program (torchtitan's rotation) and
	// in bf16 in the harness's (common.py casts the tables to the queries'
	// dtype; docs/parallelism.md §3.3.2). Rerun with the tables in fp32
	// (MEMPLAN_ROPE_FP32=1, thirty-eighth session,
	// bench/results/2026-11-28-h200x4-pp64-history/rope.jsonl) the same
	// line is +0.1% reserved: the gap is the harness's.
	"pp.py 4 bench/torch/dist/qwen-tied.yaml --schedule interleaved --stages-per-rank 2 --microbatches 4 --seq 2048 --batch 1": {Reserved, Device},
	// Llama 4's test shape over pp × dp under DDP (held out; −3.1% blind,
	// −11.6% once the shape inference's zeros were held, −5.2% once
	// cuBLAS's first product opened the context chunk's room, −3.1% with
	// NCCL's chunks, −4.2% since the context's reservation is a chunk of
	// its own, thirty-fourth session; −4.2% since NCCL's host memory takes
	// the freed reservation, thirty-seventh): rank 2's history
	// (bench/results/2026-11-28-h200x4-pp-llama4-traces, sd) replays
	// through memplan's allocator and address model to its 11,754 MiB
	// exactly since the thirty-seventh session (11,894 before; alloc's
	// TestReplayDebug with MEMPLAN_REPLAY_NCCL=59,84
	// MEMPLAN_REPLAY_CUBLAS=174); memplan's own requests, 11,254. They
	// differ from the history's in 9 stretches since the session's
	// castPlace (160 before; bench/torch/bisect.py), and the one that
	// moves the peak (replacing the first five gives 11,750) is the last
	// micro-batch's sent gradient, which the run's NCCL watchdog let go in
	// the first optimizer step, after its state was made, and memplan as
	// step() ends (a race: docs/parallelism.md §3.2.11).
	"pp.py 4 model/testdata/hf/llama4-test-4layer.json --schedule 1f1b --microbatches 4 --seq 4096 --dp 2 --mode ddp --step-pause 0.2 --checkpointing every-block": {Reserved, Device},
	// (Llama 4's test shape in the checkpointed two-stage GPipe pipeline
	// at 4,096 tokens, held-out set 53, −3.1% blind and −6.0% after the
	// thirty-sixth session, is 0.0% since the thirty-seventh ordered a
	// recomputed product's cached weight cast after its input's cast, as
	// autocast made them (estimate.castPlace); the stage's requests match
	// its history's but in a few stretches.)
	//
	// Maverick's shape in the same checkpointed GPipe pipeline (−0.1%
	// reserved until the thirty-sixth session, −4.5% since Llama 4's
	// program was made as its histories have it, the same since the
	// thirty-seventh; peak allocated +0.4%). Its last stage reserved
	// 11,262 MiB in this run and 10,750 in the two others of the same
	// configuration (bench/results/2026-11-28-h200x4-pp-llama4-traces, and
	// the thirty-seventh session's, -h200x2-maverick-gpipe-trace, whose
	// history replays through memplan's allocator and address model to its
	// 10,750 MiB): memplan predicts 10,750. The first run's 512 MiB more is
	// a placement its driver chose one time in three.
	"pp.py 2 model/testdata/hf/llama4-test-maverick-4layer.json --schedule gpipe --microbatches 4 --seq 4096 --checkpointing every-block": {Reserved, Device},
	// Held-out set 54's Llama 4 GPipe over pp 2 × ZeRO-1 dp 2 (+1.0%
	// before the thirty-seventh session, −3.3% since NCCL's host memory
	// takes the context's freed reservation, docs/allocator.md §8): its
	// last stage's two replicas replay through memplan's allocator and
	// address model to 11,772 and 11,272 MiB of 11,656 each (11,272 and
	// 11,772 before; bench/results/2026-11-28-h200x4-heldout54-traces, c1);
	// memplan's own requests differ from theirs (placement, as the lines
	// above). (Three lines listed here after the host memory, TinyLlama's
	// 1F1B over pp 2 × ZeRO-1 at 4,096 tokens, −4.1%, held-out set 59's
	// Maverick GPipe line, −3.2%, and held-out set 61's Maverick 1F1B line,
	// −3.8% blind, whose histories replay to their reserve, are −0.9%,
	// 0.0% and 0.0% since a recomputed product's cached weight cast runs
	// after its input's cast (estimate.castPlace): Maverick's 1F1B stage's
	// requests went from 156 stretches unlike its history's to 6.)
	"pp.py 4 model/testdata/hf/llama4-test-4layer.json --schedule gpipe --microbatches 4 --seq 4096 --dp 2 --mode zero1 --step-pause 0.2 --checkpointing every-block": {Reserved},
}

// pipelinePlacement are the pipeline runs more than the worst-case
// targets under, where the driver's placement of segments decides the
// reserve: replayed with the run's own segment addresses memplan's
// allocator gives its busiest rank's reserve to the MiB, through memplan's
// address model (docs/allocator.md §8) far less. They are left out of
// the spread, and a listed run that is no longer beyond the targets fails
// the test.
var pipelinePlacement = map[string]string{
	// (Llama 4's pp × DDP line, −11.6% while cuBLAS's first product left
	// the context's address space as it was, is −3.1% since the
	// thirty-fourth session opened the context chunk's room (alloc.CuBLAS)
	// and modelled NCCL's chunks, and is listed in pipelineGaps.)
	//
	// (Held-out set 59's two GPipe lines, listed here by the thirty-sixth
	// session as below, are 0.0% since the thirty-seventh found what fills
	// the context's freed reservation in a pipeline stage's process, NCCL's
	// host memory mapped as its first communicator comes up before the
	// first product (bench/torch/addr/va_maps.py, docs/allocator.md §8),
	// and ordered a recomputed product's cached weight cast as autocast
	// made it (estimate.castPlace). What the thirty-sixth session wrote of
	// them:)
	//
	// Held-out set 59's GPipe lines of Llama 4's test shape and Maverick's
	// (thirty-sixth session, blind −9.4% and −9.8% reserved, allocated
	// +0.3%; by be7d13a's program, before the session's changes, −5.3% and
	// −6.5%). The test shape's last stage
	// (bench/results/2026-11-28-h200x2-heldout-59/histories/c1-rank1)
	// replays through memplan's allocator and address model to its run's
	// 12,182 MiB, with cuBLAS's room opened at its first product or not
	// (alloc's TestReplayDebug, MEMPLAN_REPLAY_CUBLAS), and so does
	// memplan's own simulated history without the room; memplan's
	// estimate, whose requests differ in 50 stretches and which opens the
	// room, reserves 11,042; its simulated history (TestTraceDebug, with
	// the address model's events) replays to that, and to 12,182 MiB
	// without the room (TestReplayDebug's MEMPLAN_REPLAY_SKIP=library).
	// The run's driver put the room beside the segments' frontier, about
	// 2.5 GiB below the first segment, where memplan's address model puts
	// it above them all (docs/allocator.md §8): placement.
	//
	// (Held-out set 64's interleaved pipeline, the planner's fourth layout
	// for Llama-3-8B at a global batch of 8 × 8,192 tokens on four H200s,
	// −10.7% reserved blind, is +3.3% since the forty-second session
	// summed a DTensor's gradients out of place (estimate's tensor.dtAct:
	// the sequence-parallel norms' rows and the gathered module inputs):
	// its last stage's requests went from 9,439 stretches unlike its
	// history's (bench/results/2026-11-28-h200x4-pp64-history) to 6,838,
	// nearly all the harness's rotary embedding, and memplan's simulated
	// history replays to 118,166 MiB of the run's 114,346. What the
	// thirty-eighth session wrote of it: the last stage keeps every
	// micro-batch's gathered logits (2,004 MiB each) for merge_chunks'
	// 16,032 MiB concatenation at the step's end; in the history the
	// second step's last two micro-batches' logits land in the first
	// step's merge segment, so the second merge maps another 16,032 MiB,
	// where memplan's requests left that segment free.)
}

// pipelineOver are the pipeline runs over the worst-case targets, with
// why; they are left out of the spread, and a listed run that is no
// longer over fails the test.
var pipelineOver = map[string]string{
	// DDP's rebuild race (docs/multigpu.md): memplan keeps the old flat
	// gradient bucket (16 GiB for this stage) on the first stage, as every
	// TinyLlama pipeline's first stage measured it kept; this run's first
	// stage freed it at the rebuild (its optimizer step over 4 billion
	// parameters, which pp.py waits for, may outlast the race).
	"pp.py 4 specs/llama-3-8b.yaml --schedule 1f1b --microbatches 4 --dp 2 --mode ddp --seq 2048 --batch 1 --checkpointing every-block": "DDP rebuild race not measured",
	// The interleaved schedule with FSDP keeps the stage-input gradients
	// it sends with their send Works until step() ends; the run lets them
	// go once the NCCL watchdog has seen the sends complete (docs/
	// parallelism.md §3.2.5): about 17 KiB a token of the step over, +7.9%
	// allocated at 32 micro-batches of 2,048 tokens (+4.8% at 8 of 4,096).
	"pp.py 4 specs/tinyllama-1.1b.yaml --schedule interleaved --stages-per-rank 2 --microbatches 32 --dp 2 --mode fsdp --seq 2048 --batch 1": "sent gradients kept to the step's end",
	// Llama 4's test shape in a two-stage 1F1B pipeline at 4,096 tokens
	// (0.0% until the thirty-sixth session, +8.6% reserved since its
	// requests were made as the histories have them; peak allocated
	// exact): the last stage's requests differ from its history's
	// (bench/results/2026-11-28-h200x4-pp-llama4-traces, sa) in five
	// stretches, every one the release of the last micro-batch's sent
	// gradient (32 MiB), which memplan lets go as step() ends and the run's
	// NCCL watchdog let go later (in the optimizer step, in the next
	// step's forward). With the history's timing in the first two, memplan's
	// allocator replays the stage to 11,118 of its 11,122 MiB; with
	// memplan's, to 11,618: placement, on the safe side.
	"pp.py 2 model/testdata/hf/llama4-test-4layer.json --schedule 1f1b --microbatches 4 --seq 4096": "the last sent gradient's release, placement",
	// SmolLM3-3B in an interleaved two-stage pipeline, 8 micro-batches of
	// 8,192 tokens (held-out set 75, the planner's fourth layout, +16.2%
	// reserved blind, allocated +1.3%): the last stage keeps every
	// micro-batch's logits (2 GiB in bf16) for merge_chunks' concatenation
	// at the step's end, and where those 16 GiB land in the cache decides
	// the reserve, as in set 64's Llama-3-8B line (pipelinePlacement). Not
	// traced: which requests place them otherwise is not known.
	"pp.py 2 model/testdata/hf/smollm3-3b.json --schedule interleaved --microbatches 8 --seq 8192 --batch 1 --stages-per-rank 2 [rope fp32]": "placement of merge_chunks' segment",
}

// TestPipelineAccuracy holds memplan's predictions for every pipeline run
// of bench/torch/dist/pp.py (torch.distributed.pipelining; GPipe, 1F1B and
// the interleaved schedule on two H200s; tensor parallelism inside the
// stages on a pp × tp mesh of four; four stages on four; a mixture of
// experts in the stages, with expert parallelism over the replicas or
// beside the tensor parallelism, docs/moe.md §5 and §8; tied embeddings
// split as Megatron-LM splits them, §3.2; DeepSeek and GPT-OSS pipelined
// through transformers' own model, pp.py's HFStage, with tensor
// parallelism inside its stages, with sequence parallelism since the
// twenty-seventh session, grid-pp-tp-hf-sp.txt) to issue 13's
// targets against the
// busiest rank: medians within 2% (allocated) and 3% (reserved, device),
// worst within 6% and 8%, nothing more than UnderLimit under except the
// listed gaps and overs. The held-out lines (predictions committed before they were
// measured) are among them; docs/parallelism.md reports them apart.
func TestPipelineAccuracy(t *testing.T) {
	files := []string{
		"2026-11-23-h200x2-tp.jsonl", "2026-11-23-h200x2-tp-heldout.jsonl",
		"2026-11-26-h200x4-pp-interleaved.jsonl", "2026-11-26-h200x4-pp-interleaved-heldout.jsonl",
		"2026-11-26-h200x4-pp-tp.jsonl", "2026-11-26-h200x4-pp-tp-heldout.jsonl",
		"2026-11-26-h200x4-layouts.jsonl", "2026-11-26-h200x4-layouts-heldout.jsonl",
		"2026-11-26-h200x4-pp-dp.jsonl", "2026-11-26-h200x4-pp-dp-heldout.jsonl",
		"2026-11-26-h200x4-pp-interleaved-fsdp.jsonl", "2026-11-26-h200x4-pp-interleaved-fsdp-heldout.jsonl",
		"2026-11-27-h200x4-pp-moe.jsonl", "2026-11-27-h200x4-pp-moe-heldout.jsonl",
		"2026-11-27-h200x4-pp-moe-ep.jsonl", "2026-11-27-h200x4-pp-moe-ep-heldout.jsonl",
		"2026-11-27-h200x4-pp-moe-ep-fsdp.jsonl", "2026-11-27-h200x4-pp-moe-ep-fsdp-heldout.jsonl",
		"2026-11-27-h200x4-pp-moe-ep-mesh-check.jsonl",
		"2026-11-27-h200x4-pp-long-heldout.jsonl",
		"2026-11-27-h200x4-pp-tp-moe.jsonl", "2026-11-27-h200x4-pp-tp-moe-heldout.jsonl",
		"2026-11-27-h200x4-pp-tied.jsonl", "2026-11-27-h200x4-pp-tied-heldout.jsonl",
		"2026-11-27-h200x4-pp-deepseek.jsonl", "2026-11-27-h200x4-pp-deepseek-heldout.jsonl",
		"2026-11-27-h200x4-pp-gptoss.jsonl", "2026-11-27-h200x4-pp-gptoss-heldout.jsonl",
		"2026-11-27-h200x4-pp-ep-hf-recheck.jsonl", "2026-11-27-h200x4-pp-moe-hf-heldout.jsonl",
		"2026-11-27-h200x4-pp-glm-heldout.jsonl", "2026-11-27-h200x2-pp-hf-interleaved-heldout.jsonl",
		"2026-11-27-h200x4-tp-hf/pp-tp.jsonl", "2026-11-27-h200x4-tp-hf/tp-hf-4-heldout-h100x4.jsonl",
		"2026-11-27-h200x4-tp-hf-sp/pp-tp-hf-sp.jsonl", "2026-11-27-h200x4-tp-hf-sp/pp-tp-hf-sp-heldout.jsonl",
		"2026-11-27-h200x4-heldout-28/heldout-28.jsonl",
		"2026-11-28-h100x4-pp-families/pp-families.jsonl", "2026-11-28-h100x4-pp-families/pp-families-heldout.jsonl",
		"2026-11-28-h100x4-pp-families-traces/trace-pp-families.jsonl", "2026-11-28-h100x4-pp-families-traces/trace-gemma2-27b.jsonl",
		"2026-11-28-h100x4-heldout-29/heldout-29.jsonl", "2026-11-28-h200x2-heldout-30/heldout-30.jsonl",
		"2026-11-28-h200x4-pp-llama4.jsonl", "2026-11-28-h200x4-pp-llama4-heldout.jsonl",
		"2026-11-28-h200x4-pp-llama4-traces/trace.jsonl", "2026-11-28-h200x4-shape-inference-traces/trace.jsonl",
		"2026-11-28-h200x2-heldout-50/heldout-50.jsonl", "2026-11-28-h200x2-heldout-52/heldout-52.jsonl",
		"2026-11-28-h200x2-heldout-53/heldout-53.jsonl", "2026-11-28-h200x4-heldout54.jsonl",
		"2026-11-28-h200x2-heldout-59/heldout-59.jsonl", "2026-11-28-h200x4-heldout-60/layouts.jsonl",
		"2026-11-28-h200x4-heldout-61/heldout-61.jsonl", "2026-11-28-h200x4-heldout-63/heldout-63.jsonl",
		"2026-11-28-h200x4-heldout-64/heldout-64.jsonl", "2026-11-28-h200x4-heldout-65/trace.jsonl",
		"2026-11-28-h200x4-pp64-history/trace.jsonl", "2026-11-28-h200x4-pp64-history/rope.jsonl",
		"2026-11-28-h200x4-pp64-history/rope-2.jsonl", "2026-11-28-h200x4-heldout-66/heldout-66.jsonl",
		"2026-11-28-h200x4-heldout-68/heldout-68.jsonl", "2026-11-29-h200x2-heldout-75/heldout-75.jsonl",
	}
	var errs [NumMetrics][]float64
	under := map[string]bool{}
	runs := 0
	worst := 0.0 // the most reserved any run is under
	for _, f := range files {
		for _, r := range readScript(t, filepath.Join("results", f), "pp") {
			c := r.Config
			o := model.Overrides{Batch: c.Batch, Seq: c.Seq, Precision: model.AMPBF16, Optimizer: model.AdamW + "-" + model.ImplForeach,
				Checkpointing: c.Checkpointing, PP: c.PP, PPSchedule: c.Schedule, GradAccum: c.Microbatches,
				TP: c.TP, SP: c.SP, Dev: r.dev()}
			if c.Schedule == "interleaved" {
				o.PPVirtual = c.Virtual
			}
			if c.StepPause > 0 {
				o.StepPause = strconv.FormatFloat(c.StepPause, 'g', -1, 64)
			}
			setEP(&o, c.EP, c.Router, c.RecvRowsMax) // pp.py --ep
			if c.DP > 1 {
				// pp.py --dp: FSDP under a pipeline never reshards within
				// a step, memplan's stage 2.
				o.DP, o.Zero = c.DP, map[string]string{"ddp": "0", "zero1": "1", "fsdp": "2"}[c.Mode]
			}
			e := distErrors(t, r, o)
			runs++
			worst = min(worst, e[Reserved])
			if _, ok := pipelinePlacement[r.Label]; ok {
				if e[Reserved] >= -distTargets.Worst[Reserved] {
					t.Errorf("%s is listed as beyond the targets but is %+.1f%% reserved", r.Label, 100*e[Reserved])
				}
				continue
			}
			if _, ok := pipelineOver[r.Label]; ok {
				over := false
				for k := 0; k < NumMetrics; k++ {
					over = over || e[k] > distTargets.Worst[k]
				}
				if !over {
					t.Errorf("%s is listed as over but is %+.1f / %+.1f / %+.1f%%", r.Label, 100*e[Allocated], 100*e[Reserved], 100*e[Device])
				}
				continue
			}
			for k := 0; k < NumMetrics; k++ {
				errs[k] = append(errs[k], e[k])
				known := false
				for _, m := range pipelineGaps[r.Label] {
					known = known || m == k
				}
				if e[k] < -UnderLimit && !known {
					t.Errorf("%s: %s %+.1f%%", r.Label, MetricNames[k], 100*e[k])
				}
				if e[k] < -UnderLimit {
					under[r.Label] = true
				}
			}
		}
	}
	for label := range pipelineGaps {
		if !under[label] {
			t.Errorf("%s is listed as a gap but is no longer more than %.0f%% under", label, 100*UnderLimit)
		}
	}
	if runs != 202 {
		t.Fatalf("%d pipeline runs, want 202", runs)
	}
	// The headroom every pipeline estimate's note asks for is the worst
	// of these, to the next tenth of a percent.
	if got := math.Ceil(-worst*1000-1e-9) / 1000; got != estimate.PipelineUnder {
		t.Errorf("the worst pipeline run is %.2f%% under in reserved: estimate.PipelineUnder is %.3f, want %.3f",
			-100*worst, estimate.PipelineUnder, got)
	}
	checkSpread(t, errs)
}

// interleavedDDPGaps are TestPipelineInterleavedDDP's runs more than
// UnderLimit under, as pipelineGaps.
var interleavedDDPGaps = map[string][]int{
	// None since the thirty-fourth session: Llama-3-8B's held-out ZeRO-1
	// line that paused, −6.4% (its busiest rank's history gives 82,266 of
	// its 87,788 MiB through the address model of the thirty-third
	// session), is +0.0% since NCCL's chunks are modelled
	// (alloc.Allocator.CommunicatorUp, docs/allocator.md §8).
}

// TestPipelineInterleavedDDP holds the interleaved schedule with DDP and
// ZeRO-1 (pp.py --dp 2 --mode ddp|zero1, each stage module its own
// DistributedDataParallel; pp 2 × dp 2 on 4 × H200) apart from
// TestPipelineAccuracy, because memplan keeps the first stage module's
// old gradient bucket past its rebuild (DDP's rebuild race,
// docs/multigpu.md) and the runs without a pause held it past the peak in
// one of thirteen (not in the three of held-out set 68, the planner's
// layouts for gemma-2-2b and Phi-3-mini, where keeping it puts memplan
// 2.2-7.7% over and a loop that pauses within 1.3%): every prediction
// must be at most UnderLimit under the busiest rank, and the prediction
// for a loop that pauses after its first step (which frees the bucket at
// once) within issue 13's worst-case targets either way (distTargets: 6%
// allocated, 8% reserved and device), so that all but the race is
// modelled (docs/parallelism.md §3.2.5). The runs of the last file but
// one paused (pp.py --step-pause 0.2), and so does their default
// prediction.
func TestPipelineInterleavedDDP(t *testing.T) {
	under := map[string]bool{}
	defer func() {
		for label := range interleavedDDPGaps {
			if !under[label] {
				t.Errorf("%s is listed as a gap but is no longer more than %.0f%% under", label, 100*UnderLimit)
			}
		}
	}()
	files := []string{"2026-11-26-h200x4-pp-interleaved-ddp.jsonl", "2026-11-26-h200x4-pp-interleaved-ddp-heldout.jsonl",
		"2026-11-26-h200x4-pp-interleaved-ddp-heldout-2.jsonl", "2026-11-26-h200x4-pp-interleaved-ddp-pause-heldout.jsonl",
		"2026-11-28-h200x4-heldout-68/heldout-68-interleaved-dp.jsonl"}
	n := 0
	var errs [3][NumMetrics][]float64
	for _, f := range files {
		for _, r := range readScript(t, filepath.Join("results", f), "pp") {
			c := r.Config
			o := model.Overrides{Batch: c.Batch, Seq: c.Seq, Precision: model.AMPBF16, Optimizer: model.AdamW + "-" + model.ImplForeach,
				Checkpointing: c.Checkpointing, PP: c.PP, PPSchedule: c.Schedule, GradAccum: c.Microbatches, PPVirtual: c.Virtual,
				DP: c.DP, Zero: map[string]string{"ddp": "0", "zero1": "1"}[c.Mode], Dev: r.dev()}
			if c.StepPause > 0 {
				o.StepPause = strconv.FormatFloat(c.StepPause, 'g', -1, 64)
			}
			n++
			e := distErrors(t, r, o)
			o.StepPause = "1"
			rp := r // logged apart from the prediction as run (MEMPLAN_BENCH_LOG)
			rp.Label += " [predicted as paused]"
			paused := distErrors(t, rp, o)
			g := 0 // the runs that did not pause, memplan's prediction
			if c.StepPause > 0 {
				g = 2 // the runs that paused
			}
			for k := 0; k < NumMetrics; k++ {
				if slices.Contains(interleavedDDPGaps[r.Label], k) {
					under[r.Label] = under[r.Label] || e[k] < -UnderLimit
				} else if e[k] < -UnderLimit || math.Abs(paused[k]) > distTargets.Worst[k] {
					t.Errorf("%s: %s %+.1f%%, %+.1f%% for a loop that pauses", r.Label, MetricNames[k], 100*e[k], 100*paused[k])
				}
				errs[g][k] = append(errs[g][k], e[k])
				if g == 0 {
					errs[1][k] = append(errs[1][k], paused[k]) // the same runs predicted as if they paused
				}
			}
			t.Logf("%+6.1f%% %+6.1f%% %+6.1f%%  (as if pausing %+6.1f%% %+6.1f%% %+6.1f%%)  %s",
				100*e[0], 100*e[1], 100*e[2], 100*paused[0], 100*paused[1], 100*paused[2], r.Label)
		}
	}
	if n != 16 {
		t.Fatalf("%d runs, want 16", n)
	}
	// The spreads docs/accuracy.md's summary gives.
	for g, name := range []string{"without a pause", "without a pause, predicted as if pausing", "pausing"} {
		for k := 0; k < NumMetrics; k++ {
			med, w := spreadOf(errs[g][k])
			t.Logf("%s, %s: median %.1f%%, worst %.1f%% over %d runs", name, MetricNames[k], 100*med, 100*w, len(errs[g][k]))
		}
	}
}

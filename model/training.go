package model

import (
	"fmt"
	"strings"
)

// The training setup: precisions, optimizers, checkpointing, attention and
// the rest of a spec's training section.

// Precisions.
const (
	FP32    = "fp32"
	AMPBF16 = "amp-bf16"
	AMPFP16 = "amp-fp16"
	BF16    = "bf16"
	// FSDPBF16 is FSDP2's MixedPrecisionPolicy(param_dtype=bf16,
	// reduce_dtype=fp32) over fp32 weights, without autocast: bf16
	// compute and gathered parameters, fp32 shards, gradients and
	// optimizer state (docs/multigpu.md). It needs ZeRO stage 2 or 3.
	FSDPBF16 = "fsdp-bf16"
)

// Precisions lists the accepted precision names.
var Precisions = []string{FP32, AMPBF16, AMPFP16, BF16, FSDPBF16}

// Optimizer names.
const (
	Adam        = "adam"
	AdamW       = "adamw"
	SGD         = "sgd"
	SGDMomentum = "sgd-momentum"
	Adafactor   = "adafactor"
	Adam8bit    = "adam8bit"
	// PagedAdamW8bit and PagedAdamW32bit are bitsandbytes' paged AdamW:
	// the state of tensors of at least 1e5 elements lives in CUDA unified
	// memory, outside PyTorch's allocator (docs/lora.md §7).
	PagedAdamW8bit  = "paged-adamw8bit"
	PagedAdamW32bit = "paged-adamw32bit"
)

// Optimizer implementations (torch.optim's foreach, fused, for-loop).
const (
	ImplForeach = "foreach"
	ImplFused   = "fused"
	ImplForLoop = "for-loop"
)

// OptimizerNames lists the accepted optimizer names. Adam, AdamW and SGD
// take an implementation suffix: "adamw-fused", "adam-for-loop".
var OptimizerNames = []string{Adam, AdamW, SGD, SGDMomentum, Adafactor, Adam8bit, PagedAdamW8bit, PagedAdamW32bit}

// Paged reports whether the optimizer keeps state in CUDA unified memory.
func (o Optimizer) Paged() bool { return o.Name == PagedAdamW8bit || o.Name == PagedAdamW32bit }

// Optimizer is the optimizer and its implementation.
type Optimizer struct {
	Name string `json:"name"`
	Impl string `json:"impl"`
}

func (o Optimizer) String() string {
	switch o.Name {
	case Adafactor, Adam8bit, PagedAdamW8bit, PagedAdamW32bit:
		return o.Name
	}
	return o.Name + "-" + o.Impl
}

// Checkpointing modes.
const (
	CkptNone   = "none"
	CkptBlock  = "every-block"
	CkptSqrt   = "sqrt"
	CkptEveryK = "every-k"
)

// Checkpointing says which blocks keep only their input during forward and
// recompute the rest in backward.
type Checkpointing struct {
	Mode string `json:"mode"`
	// K is the segment length for every-k.
	K int64 `json:"k,omitempty"`
}

func (c Checkpointing) String() string {
	if c.Mode == CkptEveryK {
		return fmt.Sprintf("every-%d", c.K)
	}
	return c.Mode
}

// Attention implementations.
const (
	AttnSDPA  = "sdpa"
	AttnEager = "eager"
)

// Zero-grad modes.
const (
	ZeroGradNone  = "none"
	ZeroGradZeros = "zeros"
)

// Training is the training setup.
type Training struct {
	Batch int64 `json:"batch"`
	// Seq is the sequence length for token models.
	Seq int64 `json:"seq,omitempty"`
	// Image is the image side in pixels for vision models.
	Image         int64         `json:"image,omitempty"`
	Precision     string        `json:"precision"`
	Optimizer     Optimizer     `json:"optimizer"`
	Checkpointing Checkpointing `json:"checkpointing"`
	Attention     string        `json:"attention"`
	// ZeroGrad is "none" (zero_grad(set_to_none=True), the default) or
	// "zeros" (gradients kept allocated and zeroed).
	ZeroGrad  string `json:"zero_grad"`
	GradAccum int64  `json:"grad_accum"`
	// DP is the data-parallel world size (1: one GPU). Memory is
	// estimated per GPU.
	DP int64 `json:"dp"`
	// Zero is the ZeRO stage over the DP ranks: 0 replicates everything
	// (DistributedDataParallel, with its gradient buckets when DP > 1),
	// 1 shards the optimizer state, 2 also the gradients, 3 also the
	// parameters (gathered a block at a time).
	Zero int64 `json:"zero"`
	// EP splits each mixture-of-experts block's experts over EP of the DP
	// ranks (0 or 1: none); EPSkew is the rows the busiest rank receives
	// over balanced routing's (0: the default allowance, min(EP, 3)).
	// docs/moe.md §4.
	EP     int64   `json:"ep,omitempty"`
	EPSkew float64 `json:"ep_skew,omitempty"`
	// StepPause is the seconds the loop waits, once its first optimizer
	// step has finished on the GPU, before the next forward (0: none, the
	// second step starts at once; a pause after every step counts too). It decides
	// whether DDP's old flat bucket outlives its rebuild at the second
	// step (docs/multigpu.md, "DDP's bucket rebuild race").
	StepPause float64 `json:"step_pause,omitempty"`
	// Steps is the run's optimizer steps (0: a long run, LongRunSteps).
	// A run that leaks has its figures from its last step
	// (estimate.Result.LeakPerStep); any other is simulated for at most
	// this many steps (at least two, three under DDP), as a shorter run's
	// cache has no time to grow further (docs/allocator.md §8).
	Steps int64 `json:"steps,omitempty"`
	// LossOutsideAutocast says the loop computes the loss after leaving
	// its autocast region (with autocast: logits = model(x); then
	// loss = loss_fn(logits, y)), as bench/torch/dist's tp.py and cp.py
	// do: autocast's cached half copies of the weights are freed before
	// the logits' cast and the loss. false (the default) is the loss
	// inside the region: PyTorch's AMP recipe, transformers' models
	// (the loss inside forward) and torchtitan. Only AMP precisions cache
	// casts; a pipeline's schedule computes the loss inside its step, so
	// pipelines ignore it.
	LossOutsideAutocast bool `json:"loss_outside_autocast,omitempty"`
	// Offload moves ZeRO state to host memory: "optimizer" (optimizer
	// state and its step, ZeRO-Offload) or "params" (also the parameter
	// shards, ZeRO-Infinity; needs stage 3). "none" keeps all on the GPU.
	Offload string `json:"offload"`
	// PP is the number of pipeline stages (torch.distributed.pipelining;
	// 0 or 1: none) and PPSchedule its schedule (PPGPipe, PP1F1B). With
	// PP > 1, Batch is the micro-batch and GradAccum the micro-batches one
	// step pipelines; memory is per GPU, for the busiest stage
	// (docs/parallelism.md §3.2).
	PP         int64  `json:"pp,omitempty"`
	PPSchedule string `json:"pp_schedule,omitempty"`
	// PPVirtual is the stages each rank holds under the interleaved
	// schedule (ScheduleInterleaved1F1B; 0: 2), round robin: rank r holds
	// stages r, r+PP, … (docs/parallelism.md §3.2).
	PPVirtual int64 `json:"pp_virtual,omitempty"`
	// BucketView is DDP's gradient_as_bucket_view=True (stages 0 and 1):
	// the gradients are slices of the reducer's buckets, not a second
	// copy. Other stages ignore it.
	BucketView bool `json:"bucket_view,omitempty"`
	// FSDPInit is how the model reaches FSDP2's fully_shard (stages 2 and
	// 3 over dp > 1; other stages, offload and pipeline parallelism ignore
	// it) and tensor parallelism's parallelize_module (FSDPInitGPU builds
	// the whole model on the GPU first, as bench/torch/dist/tp.py does;
	// the others allocate each shard directly): "" (FSDPInitHost, the default:
	// built on the host, as transformers' from_pretrained, each
	// fully_shard call moving its unit's parameters to the GPU whole
	// before sharding them), FSDPInitGPU (moved whole to the GPU first:
	// model.cuda(), then fully_shard) or FSDPInitMeta (made on the meta
	// device and materialised by to_empty, as torchtitan does: each shard
	// allocated directly). The freed whole parameters leave holes among
	// the shards (docs/multigpu.md, "Wrapping a model built on the host").
	FSDPInit string `json:"fsdp_init,omitempty"`
	// EmptyCacheAfterWrap says the script calls torch.cuda.empty_cache()
	// once fully_shard has wrapped a model built on the host or the GPU
	// (FSDPInitHost, FSDPInitGPU), before the first step: the cached
	// blocks the freed whole parameters left go back to the driver, as
	// bench/torch/dist/train.py and bench/torch/measure.py do. false (the
	// default) keeps them for the steps to reuse, as accelerate's
	// fsdp2_prepare_model (transformers' Trainer) and a plain script
	// leave them. Meta-device models, other stages and pipelines ignore
	// it (docs/multigpu.md, "Wrapping a model built on the host").
	EmptyCacheAfterWrap bool `json:"empty_cache_after_wrap,omitempty"`
	// FSDPRoot is what FSDP2's root unit does after the forward under
	// ZeRO 3: "" (FSDPRootReshard, the default) reshards it with the
	// blocks, as torchtitan, accelerate and bench/torch/dist/train.py pass
	// reshard_after_forward=True to fully_shard(model); FSDPRootKeep keeps
	// its parameters unsharded until the backward, torch's default for the
	// root (reshard_after_forward=None, as bench/torch/dist/tp.py and
	// cp.py call it). docs/multigpu.md, "The root unit".
	FSDPRoot string `json:"fsdp_root,omitempty"`
	// ReshardAfterForward, above 1 under ZeRO 3, is fully_shard's
	// reshard_after_forward as an int N: after each unit's forward its
	// parameters are kept sharded over N ranks (each rank clones its
	// 1/N of every unsharded storage) instead of all, and the backward's
	// all-gather runs within those N ranks, over a process group of its
	// own. N divides dp (ReshardError); 0, or N = dp, is ZeRO 3's
	// resharding over every rank. docs/multigpu.md, "Resharding to N
	// ranks".
	ReshardAfterForward int64 `json:"reshard_after_forward,omitempty"`
	// DPReplicate, above 1 under ZeRO 2 or 3, is HSDP: FSDP2 over a
	// two-dimensional mesh whose dp GPUs are DPReplicate replicas of an
	// FSDP group of dp/DPReplicate (torchtitan's
	// data_parallel_replicate_degree): each parameter is sharded over
	// its group only (FSDPShards), and each gradient shard all-reduced
	// in place across the replicas after its reduce-scatter. 0 or 1:
	// FSDP over all dp. docs/multigpu.md, "HSDP".
	DPReplicate int64 `json:"dp_replicate,omitempty"`
	// FSDPExperts is how FSDP2 shards a block's fused expert weights
	// [experts, …] (stages 2 and 3): "" (FSDPExpertsDim0, fully_shard's
	// default) along the experts, each rank's share padded to whole
	// experts, so that ranks beyond the experts hold padding
	// (model.ExpertsPadded); FSDPExpertsDim1 along their second dimension
	// (a shard_placement_fn returning Shard(1)); FSDPExpertsAuto as
	// torchtitan's apply_fsdp chooses: the second dimension when the ranks
	// sharding a block's experts, times ep, outnumber them, else the
	// experts (docs/moe.md §14).
	FSDPExperts string `json:"fsdp_experts,omitempty"`
	// TP is the tensor-parallel size (0 or 1: none): torchtitan's plan,
	// columnwise q, k, v, gate and up, rowwise o and down, a
	// vocabulary-parallel embedding and head (docs/parallelism.md §3.1).
	// SP adds sequence parallelism (norms and residuals split along the
	// sequence); LossParallel keeps the logits split by vocabulary for the
	// loss. CP is the context-parallel size (docs/parallelism.md §3.3).
	TP           int64 `json:"tp,omitempty"`
	SP           bool  `json:"sp,omitempty"`
	LossParallel bool  `json:"loss_parallel,omitempty"`
	CP           int64 `json:"cp,omitempty"`
	// AllocConf is the PYTORCH_ALLOC_CONF the job runs with (alloc.Parse
	// syntax, docs/allocator.md); "" is PyTorch's default.
	AllocConf string `json:"alloc_conf,omitempty"`
	// LoRA, when set, freezes the base weights and trains low-rank
	// adapters (docs/lora.md). Quant is the frozen base's storage:
	// "" (as loaded), int8 or nf4; DoubleQuant quantizes nf4's absmax.
	LoRA        *LoRA  `json:"lora,omitempty"`
	Quant       string `json:"quant,omitempty"`
	DoubleQuant bool   `json:"double_quant,omitempty"`
}

// Offload modes.
const (
	OffloadNone      = "none"
	OffloadOptimizer = "optimizer"
	OffloadParams    = "params"
)

// How the model reaches FSDP2's fully_shard (Training.FSDPInit).
const (
	FSDPInitHost = ""
	FSDPInitGPU  = "gpu"
	FSDPInitMeta = "meta"
)

// What FSDP2's root unit does after the forward (Training.FSDPRoot).
const (
	FSDPRootReshard = ""
	FSDPRootKeep    = "keep"
)

// How FSDP2 shards the fused experts (Training.FSDPExperts).
const (
	FSDPExpertsDim0 = ""
	FSDPExpertsDim1 = "dim1"
	FSDPExpertsAuto = "auto"
)

// parseFSDPExperts reads fsdp_experts: dim0 (stored as FSDPExpertsDim0),
// dim1 or auto.
func parseFSDPExperts(v string, out *string) error {
	return parseDefaulted(v, out, "dim0", FSDPExpertsDim1, FSDPExpertsAuto)
}

// ExpertsAlongDim1 says whether FSDP2 shards a block's fused experts along
// their second dimension under mode (Training.FSDPExperts) when w ranks
// shard its localExperts (a block's experts over ep).
func ExpertsAlongDim1(mode string, localExperts, w int64) bool {
	switch mode {
	case FSDPExpertsDim1:
		return true
	case FSDPExpertsAuto:
		return w > localExperts
	}
	return false
}

// parseFSDPRoot reads fsdp_root: reshard (stored as FSDPRootReshard) or
// keep.
func parseFSDPRoot(v string, out *string) error {
	return parseDefaulted(v, out, "reshard", FSDPRootKeep)
}

// parseFSDPInit reads fsdp_init: host (stored as FSDPInitHost), gpu or
// meta.
func parseFSDPInit(v string, out *string) error {
	return parseDefaulted(v, out, "host", FSDPInitGPU, FSDPInitMeta)
}

// parseDefaulted reads a setting whose default, spelled def, is stored as
// "" and whose other values as themselves.
func parseDefaulted(v string, out *string, def string, others ...string) error {
	if v == def {
		*out = ""
		return nil
	}
	for _, o := range others {
		if v == o {
			*out = v
			return nil
		}
	}
	all := append([]string{def}, others...)
	return fmt.Errorf("want %s or %s, got %q", strings.Join(all[:len(all)-1], ", "), all[len(all)-1], v)
}

// Mixed reports whether the precision is autocast over fp32 weights.
func (t Training) Mixed() bool { return t.Precision == AMPBF16 || t.Precision == AMPFP16 }

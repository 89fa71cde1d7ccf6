// Package planner chooses how to lay a training job out over GPUs: data,
// tensor, pipeline, context and expert parallelism, the ZeRO stage,
// activation checkpointing, the micro-batch and gradient accumulation. It
// enumerates the layouts that reach a global batch on a number of GPUs,
// asks an Oracle for the busiest rank's memory of each, keeps those that
// fit the target band, and ranks them: fewest GPUs first, then a
// throughput proxy. The search, its pruning and the proxy are described in
// docs/planner.md.
package planner

import (
	"fmt"
	"strings"

	"github.com/memplan/memplan/model"
)

// Schedule is a pipeline schedule of torch.distributed.pipelining.
type Schedule string

// Pipeline schedules.
const (
	// GPipe runs every micro-batch's forward, then every backward
	// (ScheduleGPipe): a stage holds all micro-batches' activations.
	GPipe Schedule = model.PPGPipe
	// OneFOneB alternates forwards and backwards after a warm-up
	// (Schedule1F1B): stage i holds at most pp−i micro-batches.
	OneFOneB Schedule = model.PP1F1B
	// Interleaved gives each rank Virtual stages, round robin
	// (ScheduleInterleaved1F1B): a smaller bubble, more in flight.
	Interleaved Schedule = model.PPInterleaved
)

// Layout is one way to run a training job: the parallel degrees, the
// sharding and the batch split. The GPUs it takes are DP·TP·PP·CP; EP
// splits the experts over ranks of the DP·CP group (as torchtitan borrows
// its expert-parallel mesh from the data-parallel and context-parallel
// dimensions), so it adds none.
type Layout struct {
	DP int64 `json:"dp"`
	TP int64 `json:"tp"`
	PP int64 `json:"pp"`
	CP int64 `json:"cp"`
	EP int64 `json:"ep"`
	// SP is sequence parallelism with TP: norms and residuals sharded
	// along the sequence (torchtitan's SequenceParallel).
	SP bool `json:"sp"`
	// LossParallel keeps the logits sharded by vocabulary and computes
	// the loss on the shards.
	LossParallel bool `json:"loss_parallel"`
	// Zero is the ZeRO stage over the data-parallel ranks (0–3).
	Zero int64 `json:"zero"`
	// ReshardTo, with ZeRO 3, is FSDP2's reshard_after_forward=N: after
	// each unit's forward the rank keeps its 1/N of the parameters, and
	// the backward's all-gather runs within the N data-parallel ranks of
	// one node (0: resharded over all). The planner offers it where the
	// data-parallel group spans nodes (docs/planner.md §2).
	ReshardTo int64 `json:"reshard_after_forward,omitempty"`
	// Schedule and Virtual (stages per rank, interleaved only) apply
	// when PP > 1.
	Schedule Schedule `json:"pp_schedule,omitempty"`
	Virtual  int64    `json:"virtual_stages,omitempty"`
	// Checkpointing is the activation checkpointing mode.
	Checkpointing model.Checkpointing `json:"checkpointing"`
	// Micro is the micro-batch per data-parallel rank; Accum the
	// micro-batches per optimizer step (with PP, the micro-batches the
	// schedule pipelines).
	Micro int64 `json:"micro_batch"`
	Accum int64 `json:"grad_accum"`
}

// GPUs is the number of GPUs the layout takes.
func (l Layout) GPUs() int64 { return l.DP * l.TP * l.PP * l.CP }

// GlobalBatch is the samples per optimizer step: DP·Micro·Accum.
func (l Layout) GlobalBatch() int64 { return l.DP * l.Micro * l.Accum }

// Simple reports whether the layout is data parallelism alone (with any
// ZeRO stage), the layouts the estimator simulates today.
func (l Layout) Simple() bool {
	return l.TP <= 1 && l.PP <= 1 && l.CP <= 1 && l.EP <= 1 && !l.SP && !l.LossParallel
}

// String is the layout in one line, such as "dp8·tp4·pp2 zero1 1f1b
// mb2×acc16": degrees of 1 are left out (dp always shown), then the ZeRO
// stage (with "reshard-to-N" after ZeRO 3 resharded to N ranks), the
// pipeline schedule, the checkpointing mode when not none, and the
// micro-batch × accumulation.
func (l Layout) String() string {
	dims := []string{fmt.Sprintf("dp%d", l.DP)}
	add := func(name string, n int64, extra string) {
		if n > 1 {
			dims = append(dims, fmt.Sprintf("%s%d%s", name, n, extra))
		}
	}
	sp := ""
	if l.SP {
		sp = "+sp"
	}
	add("tp", l.TP, sp)
	add("pp", l.PP, "")
	add("cp", l.CP, "")
	add("ep", l.EP, "")
	parts := []string{strings.Join(dims, "·"), fmt.Sprintf("zero%d", l.Zero)}
	if l.ReshardTo > 1 {
		parts = append(parts, fmt.Sprintf("reshard-to-%d", l.ReshardTo))
	}
	if l.PP > 1 {
		s := string(l.Schedule)
		if l.Schedule == Interleaved {
			s += fmt.Sprintf("×%d", l.Virtual)
		}
		parts = append(parts, s)
	}
	if l.LossParallel {
		parts = append(parts, "loss-parallel")
	}
	if m := l.Checkpointing.Mode; m != "" && m != model.CkptNone {
		parts = append(parts, "ckpt="+l.Checkpointing.String())
	}
	parts = append(parts, fmt.Sprintf("mb%d×acc%d", l.Micro, l.Accum))
	return strings.Join(parts, " ")
}

// InvalidError says why a layout cannot run a model. Validate returns it.
type InvalidError struct {
	Layout Layout
	// Rule is the rule broken, without the layout's numbers ("heads
	// divisible by tp"); Reason says it with them.
	Rule, Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("%s: %s", e.Layout, e.Reason) }

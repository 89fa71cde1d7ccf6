package estimate

import (
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// NCCL's memory on a rank, outside the caching allocator (docs/multigpu.md):
// a run's ranks (ncclFor, ncclRange), a pipeline's (pipelineBaseNCCL;
// pipelineNCCL in stages.go), and the least of any rank for bounds made
// without a simulation (NCCLFloor). The communicators themselves:
// layoutNCCL in tensorparallel.go.

// ncclFor is the device memory NCCL takes on the busiest rank of a
// layout (docs/parallelism.md §3.5): the communicators (layoutNCCL),
// with the channel counts measured on H200s (parallel.H200x2Defaults,
// docs/multigpu.md: 840 MiB for one, the same on 2 and on 4 GPUs; other
// hosts pick other channel counts), and the point-to-point buffers of
// each peer. Loading a tensor-parallel model that was built whole on the
// GPU (loadWhole) scatters each sharded parameter from rank 0
// (distribute_tensor's mesh_scatter, point-to-point sends): the other
// ranks receive from it, which sets up a receive buffer per channel, and
// rank 0 sends to each (measured at t = 2: 384 MiB more than a
// data-parallel run on rank 1, 128 on rank 0; at t = 4: 385 on each
// receiver, 257 on rank 0). The busier of the two counts: a receiver up to
// t = 5, rank 0 beyond. A model built on the meta device (or loaded shard
// by shard) scatters nothing; its parameters drawn as DTensors connect the
// default group as a pipeline's stages do (communicators; counted also for
// sharded loading, which draws nothing: the safe side).
// tpAllToAll is layoutNCCL's.
func ncclFor(t model.Training, tpAllToAll bool) int64 {
	_, most := ncclRange(t, tpAllToAll)
	return most
}

// ncclRange is the least and the most NCCL memory a rank of a run of t
// without a pipeline holds (ncclFor): the same on every rank, but where a
// model loaded whole scatters its shards from rank 0 (scatterNCCL's
// sender and receivers).
func ncclRange(t model.Training, tpAllToAll bool) (least, most int64) {
	if t.TP > 1 && t.FSDPInit != model.FSDPInitGPU {
		n := mustNCCL(parallel.NCCLBytes(layoutNCCL(t, true, tpAllToAll)))
		return n, n
	}
	c := layoutNCCL(t, false, tpAllToAll)
	if t.TP > 1 && !scatterShared(t) {
		source, receiver := scatterNCCL(c, t.TP)
		return min(source, receiver), max(source, receiver)
	}
	n := mustNCCL(parallel.NCCLBytes(c))
	return n, n
}

// NCCLFloor is the least device memory NCCL's communicators hold on any
// rank of a run of training t: what every rank's device total counts at
// least, for lower bounds made without a simulation (the planner's).
// Under a pipeline, a first or last stage's rank without an embedding
// group (pipelineNCCL's least); else ncclRange's least.
func NCCLFloor(t model.Training) int64 {
	if t.PP > 1 {
		return mustNCCL(parallel.NCCLBytes(pipelineBaseNCCL(t, false))) // without the model's own all-to-alls: a floor
	}
	least, _ := ncclRange(t, false) // without the model's own all-to-alls: a floor
	return least
}

// pipelineBaseNCCL is what every pipeline rank of t connects: the
// layout's communicators (built on the meta device), the tensor-parallel
// all-to-all's peers where tpAllToAll says the stages' program has one
// (layoutNCCL), and a neighbouring stage (pipelineNCCL adds the rest).
func pipelineBaseNCCL(t model.Training, tpAllToAll bool) parallel.NCCL {
	c := layoutNCCL(t, true, tpAllToAll)
	c.PipelineNeighbour = true
	return c
}

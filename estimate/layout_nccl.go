package estimate

import (
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// NCCL's communicators and buffers on a rank of a multi-GPU layout: which
// groups it connects, over how many peers (docs/parallelism.md §3.5).

// scatterShared says whether a whole load's scatter over the tp ranks runs
// on connections the layout's all-to-all has made already: where the
// tensor- and the expert-parallel groups are both the default group (tp =
// ep = the world, on a device mesh: epIsDefaultGroup), every rank is
// connected to every other point to point (measured on 2 and 4 × H200, tp
// = ep = 2 and 4: NCCL's memory that of the all-to-all alone, 311 MiB less
// than with the scatter's own receive buffers;
// bench/results/2026-11-27-tp-ep-h200x4.jsonl).
func scatterShared(t model.Training) bool {
	return epIsDefaultGroup(t) && t.TP == worldSize(t)
}

// layoutNCCL is NCCL on a rank of layout t: its communicators
// (communicators), of which the expert-parallel group's runs only
// all-to-alls, and the point-to-point buffers of the expert- or
// context-parallel all-to-all, which sends to and receives from every
// other rank of its group (measured: device in use less reserved 2,057
// MiB on both ranks of every cp.py run on two GPUs, 447 more than data
// parallelism's 1,610, and 2,827 on four, 58 + 3 x 384 more; an
// expert-parallel group's own communicator adds its initialisation,
// 198 MiB, and no ring: bench/results/2026-11-26-h200x4-ep.jsonl).
// dtensorInit is communicators'. tpAllToAll says the tensor-parallel
// program exchanges tensors all-to-all over the tp group too (OLMo 2's
// query and key norms, model.Attention.QKNormRanks), which connects every
// other tp rank point to point (measured: 2 × H100, device in use 1.4 to
// 1.9% above the prediction without them;
// bench/results/2026-11-27-h100x2-tp-olmo2) unless the expert-parallel
// all-to-all has connected the same group.
func layoutNCCL(t model.Training, dtensorInit, tpAllToAll bool) parallel.NCCL {
	c := parallel.H200x2Defaults
	c.Communicators = communicators(t, dtensorInit)
	if t.EP > 1 {
		c.Communicators--
		if !epIsDefaultGroup(t) {
			c.NoRing = 1
		}
		if t.Zero >= 2 {
			// FSDP2 gathers and reduces each block's experts over the
			// dp·cp·tp/ep ranks that hold them (expertShards): a group
			// of its own (fsdp.go), of one rank when dp·cp·tp = ep,
			// which never connects a ring (measured: 197 MiB,
			// bench/results/2026-11-26-h200x4-ep-fsdp.jsonl).
			if expertShards(t) > 1 {
				c.Communicators++
			} else {
				c.NoRing++
			}
		}
	}
	if n := t.ReshardAfterForward; n > 1 && n < t.FSDPShards() {
		// FSDP2's post-forward mesh: the backward's all-gathers run
		// within groups of N ranks, a communicator of its own (read
		// from torch's _get_post_forward_mesh_info; not measured under
		// NCCL: docs/multigpu.md, "Resharding to N ranks").
		c.Communicators++
	}
	c.SendPeers, c.RecvPeers = allToAllPeers(t), allToAllPeers(t)
	if tpAllToAll && t.TP > 1 && !(epIsDefaultGroup(t) && t.TP == worldSize(t)) {
		c.SendPeers += int(t.TP) - 1
		c.RecvPeers += int(t.TP) - 1
	}
	return c
}

// expertShards is the ranks FSDP shards a block's experts over (the
// efsdp mesh): the data-parallel ranks (with context parallelism the dp·cp
// ranks FSDP shards over) and the tensor-parallel ones, whose experts
// expert parallelism splits too, that hold the same experts.
func expertShards(t model.Training) int64 {
	return max(t.DP, 1) * max(t.CP, 1) * max(t.TP, 1) / max(t.EP, 1)
}

// allToAllPeers is the ranks an all-to-all sends to and receives from,
// point to point: every other rank of the expert- and of the
// context-parallel group (each group its own communicator, with its own
// connections).
func allToAllPeers(t model.Training) int {
	if epIsDefaultGroup(t) && t.CP == worldSize(t) {
		return int(t.CP) - 1 // one communicator, the same connections
	}
	return int(max(t.EP, 1)-1) + int(max(t.CP, 1)-1)
}

// epIsDefaultGroup says whether the expert-parallel group is the default
// process group, with no communicator of its own. memplan takes an EP
// group to be made with new_group, as bench/torch/dist/ep.py makes it for
// train.py (its own communicator even where it spans every rank:
// measured, 198 MiB), except under context or tensor parallelism, which
// torchtitan, cp.py --ep and tp.py --ep run on a device mesh: there a mesh
// dimension that spans every rank is the default group (measured on 4 ×
// H100, cp 4 × ep 4: the same NCCL memory as context parallelism alone;
// bench/results/2026-11-27-cp-ep-h100x4.jsonl).
func epIsDefaultGroup(t model.Training) bool {
	return t.EP > 1 && (t.CP > 1 || t.TP > 1) && t.EP == worldSize(t)
}

// worldSize is the ranks of layout t: expert parallelism borrows its own
// from the others.
func worldSize(t model.Training) int64 {
	return max(t.DP, 1) * max(t.TP, 1) * max(t.CP, 1) * max(t.PP, 1)
}

// scatterNCCL is NCCL's memory on the two kinds of rank of a whole load's
// scatter (loadWhole) over tp ranks, given the rest of the layout's NCCL
// c: rank 0 sends to the tp-1 others, each of which receives from it.
func scatterNCCL(c parallel.NCCL, tp int64) (source, receiver int64) {
	send, recv := c, c
	send.SendPeers += int(tp) - 1
	recv.RecvPeers++
	return mustNCCL(parallel.NCCLBytes(send)), mustNCCL(parallel.NCCLBytes(recv))
}

// communicators is the number of NCCL communicators a rank has connected
// by the end of its first training step: one per parallel dimension
// larger than one (each dimension of the device mesh is its own process
// group; a dimension that spans the whole world is the default group), and
// the default group's own when no dimension spans the world (an
// expert-parallel one that does runs only all-to-alls, which connect no
// ring: layoutNCCL) but the default group runs a collective. It does when the parameters are
// DTensors initialised by a random op (dtensorInit: modules built on the
// meta device, tensor-parallel, then materialised and drawn on the GPU, as
// torchtitan and bench/torch/dist/pp.py do): DTensor's random-number
// tracker broadcasts its state from rank 0 over the default group first.
// Measured on 4 × H200 with NCCL's INIT log (bench/results/2026-11-26-h200x4-nccl-init.txt):
// every rank of pp.py on a pp × tp mesh connects three communicators, the
// world's first; tp.py on a dp × tp mesh, which builds the model whole and
// distributes it, connects the world's only after the measured steps; and
// tp.py --meta on a dp 2 × tp 2 mesh with ep 4, whose EP group is the
// default group, 301 MiB more outside the allocator than without the
// broadcast's ring (bench/results/2026-11-27-tp-meta-heldout-h100x4.jsonl).
func communicators(t model.Training, dtensorInit bool) int {
	n, spans := 0, false
	dims := []int64{t.DP, t.TP, t.CP, t.PP}
	if r := t.DPReplicate; r > 1 {
		// HSDP's two-dimensional mesh: the replicas' group and the
		// FSDP group's, each its own communicator (read from torch's
		// source; not measured: docs/multigpu.md, "HSDP").
		dims = []int64{r, t.FSDPShards(), t.TP, t.CP, t.PP}
	}
	for _, d := range dims {
		if d > 1 {
			n++
			spans = spans || d == worldSize(t)
		}
	}
	if t.EP > 1 {
		n++ // layoutNCCL takes it back: the all-to-all's connections, no ring
	}
	if n > 1 && !spans && dtensorInit && t.TP > 1 {
		n++
	}
	return n
}

package parallel

import "fmt"

// NCCL's per-channel FIFO sizes on Hopper (NCCL 2.28, src/init.cc): the LL
// protocol's 8 lines x 512 threads x 8 steps x 16 B and LL128's 120 x 640 x
// 8 steps x 8 B. The SIMPLE protocol's buffer is NCCL_BUFFSIZE.
const (
	ncclLLBytes           int64 = 8 * 512 * 8 * 16
	ncclLL128Bytes        int64 = 120 * 640 * 8 * 8
	NCCLDefaultBuffer     int64 = 4 << 20 // NCCL_BUFFSIZE's default
	ncclGranularity       int64 = 2 << 20 // cuMem allocation granularity
	ncclSendBytes               = ncclGranularity
	mib                   int64 = 1 << 20
	ncclProcessInit             = 168 * mib // first communicator in a process, measured
	ncclProcessFirstOp          = 186 * mib // first collective in a process, measured
	ncclCommInit                = 6 * mib   // each communicator, measured
	ncclChannelInit             = 6 * mib   // per channel at init, measured
	ncclP2PFirst                = 58 * mib  // first send/recv, measured
	ncclPipelineNeighbour       = 99 * mib  // a pipeline stage's batched send/recv to a neighbour, measured
)

// NCCL describes the NCCL communicators of one process (one GPU).
type NCCL struct {
	// Communicators is the number of NCCL communicators (torch process
	// groups, one per DeviceMesh dimension that is not the whole world,
	// plus the default group) that have run at least one collective.
	Communicators int
	// NoRing is the number of further communicators that never connect
	// the ring, so hold no collective buffers beside their initialisation:
	// those that run only point-to-point operations (an expert-parallel
	// group's all-to-alls) and those of one rank (FSDP2 over the dp/ep
	// ranks that hold the same experts, when dp = ep).
	NoRing int
	// Channels is the number of collective channels (NCCL logs
	// "Channel xx/NN"); 24 on 2xH200 NV18 by default.
	Channels int
	// P2PChannels is the number of point-to-point channels: 32 on 2xH200
	// by default, equal to Channels when NCCL_MIN/MAX_NCHANNELS fix both.
	P2PChannels int
	// BuffSize is NCCL_BUFFSIZE (the SIMPLE protocol's buffer); 0 means the
	// default 4 MiB.
	BuffSize int64
	// SendPeers and RecvPeers are the ranks this rank sends to and
	// receives from with point-to-point operations (an all-to-all over n
	// ranks: n-1 each; a scatter's source: n-1 sends; a receiver: 1).
	SendPeers, RecvPeers int
	// PipelineNeighbour says the rank sends to and receives from a
	// neighbouring pipeline stage (torch.distributed.pipelining's batched
	// send/recv on the pipeline group's communicator).
	PipelineNeighbour bool
}

// RecvBufferBytes is one channel's receive buffer for one peer: the LL,
// LL128 and SIMPLE FIFOs in one cuMem allocation, rounded up to the 2 MiB
// granularity (10 MiB at the default NCCL_BUFFSIZE).
func RecvBufferBytes(buffSize int64) int64 {
	if buffSize <= 0 {
		buffSize = NCCLDefaultBuffer
	}
	n := ncclLLBytes + ncclLL128Bytes + buffSize
	return (n + ncclGranularity - 1) / ncclGranularity * ncclGranularity
}

// NCCLBytes is the device memory NCCL holds on one GPU outside PyTorch's
// caching allocator once every communicator has run its first collective,
// for a two-rank ring on one NVLink host with cuMem on and NVLS off (NCCL
// 2.28.9, measured on 2xH200; docs/multigpu.md):
//
//   - 168 MiB when the process creates its first communicator and 186 MiB
//     at its first collective (once per process);
//   - per communicator at init: 6 MiB + 6 MiB x max(Channels, P2PChannels)
//     (three tiny allocations per channel, each rounded up to 2 MiB);
//   - per communicator at its first collective: Channels x (a receive
//     buffer and a 2 MiB send buffer), the ring connection to the one peer; a communicator
//     that runs only point-to-point operations never connects the ring
//     (NoRing: an expert-parallel group's all-to-alls, measured on 2 and
//     4 × H200, bench/results/2026-11-26-h200x4-ep.jsonl: the group's
//     communicator adds 198–200 MiB beside its point-to-point buffers, its
//     initialisation; and a one-rank group's, 197 MiB in
//     2026-11-26-h200x4-ep-fsdp.jsonl);
//   - at the first send/recv: 58 MiB, plus P2PChannels x 2 MiB for each
//     peer it sends to and P2PChannels x receive buffer for each peer it
//     receives from (measured on 4 x H200, NCCL 2.28.9: a scatter's source
//     +257 MiB with three peers, each receiver +385; context parallelism's
//     all-to-all over four ranks 1,217 MiB, 58 + 3 x 384); the 58 MiB once
//     per process, also when a pipeline rank's stage runs an all-to-all
//     (bench/results/2026-11-27-h200x4-pp-moe-ep.jsonl: 385 MiB above the
//     same pipeline without expert parallelism, one peer's buffers);
//   - a pipeline stage's batched send/recv to a neighbour: the first
//     send/recv's 58 MiB and 99 MiB more (device in use less reserved
//     1,767 MiB on every rank of every pp.py run against 1,608–1,612 for
//     data parallelism, 2 × H200, bench/results/2026-11-23-h200x2-tp.jsonl;
//     the first and last of four stages the same, 1,769 MiB,
//     2026-11-26-h200x4-layouts.jsonl).
//
// The world size does not enter: on one host of 2 and of 4 H200s NCCL
// picks the same channels and a ring with one peer per channel, and every
// figure above is the same (bench/results/2026-11-26-h200x4-nccl.jsonl).
// NVLS and hosts of more GPUs are not covered.
func NCCLBytes(c NCCL) (int64, error) {
	if c.Communicators < 0 || c.NoRing < 0 || c.Channels < 0 || c.P2PChannels < 0 || c.BuffSize < 0 || c.SendPeers < 0 || c.RecvPeers < 0 {
		return 0, fmt.Errorf("nccl memory: negative setting in %+v", c)
	}
	if c.Communicators+c.NoRing == 0 {
		return 0, nil
	}
	if c.Channels == 0 {
		return 0, fmt.Errorf("nccl memory: %d communicators with no channels", c.Communicators+c.NoRing)
	}
	recv := RecvBufferBytes(c.BuffSize)
	initComm := ncclCommInit + ncclChannelInit*int64(max(c.Channels, c.P2PChannels))
	perComm := initComm + int64(c.Channels)*(recv+ncclSendBytes)
	total := ncclProcessInit + ncclProcessFirstOp + int64(c.Communicators)*perComm + int64(c.NoRing)*initComm
	if c.SendPeers+c.RecvPeers > 0 || c.PipelineNeighbour {
		total += ncclP2PFirst
	}
	if c.PipelineNeighbour {
		total += ncclPipelineNeighbour
	}
	total += int64(c.SendPeers) * int64(c.P2PChannels) * ncclSendBytes
	total += int64(c.RecvPeers) * int64(c.P2PChannels) * recv
	return total, nil
}

// H200x2Defaults is NCCL as measured on 2 x H200 (NV18 NVLink, driver
// 580.159.04, NCCL 2.28.9, NVLS off, default NCCL_BUFFSIZE) on 2026-11-23:
// one communicator (the default process group, which DDP, ZeRO-1 and a 1-D
// FSDP mesh all use), 24 collective and 32 point-to-point channels
// (bench/results/2026-11-23-h200x2-nccl.jsonl, docs/multigpu.md). It is
// 840 MiB after the first collective.
var H200x2Defaults = NCCL{Communicators: 1, Channels: 24, P2PChannels: 32}

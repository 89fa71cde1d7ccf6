// Package parallel holds pure functions for the memory that data parallelism
// adds per GPU, each read from PyTorch's or NCCL's source and checked against
// real two-GPU runs (docs/multigpu.md):
//
//   - ZeroPartition: how torch's ZeroRedundancyOptimizer (ZeRO-1) assigns
//     whole parameters to ranks, so the busiest rank's optimizer state;
//   - DDPBuckets: DistributedDataParallel's gradient buckets, and
//     AssignBuckets, the bucketing rule behind them and DDP's initial
//     broadcast (c10d's compute_bucket_assignment_by_size);
//   - FSDPStreamPools: the reserved bytes of FSDP2's all-gather and
//     reduce-scatter streams' allocator pools (SegmentsFor, PaddedNumel);
//   - NCCLBytes: the device memory NCCL's communicators take outside the
//     caching allocator.
//
// The package depends on nothing in estimate or model: callers pass sizes.
package parallel

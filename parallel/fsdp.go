package parallel

import "fmt"

// The caching allocator's segment rules (c10/cuda/CUDACachingAllocator.cpp):
// requests of at most 1 MiB share 2 MiB segments, requests under 10 MiB
// share 20 MiB segments, larger ones get their own segment rounded up to
// 2 MiB; every request is rounded up to 512 bytes.
const (
	allocSmall     int64 = 1 << 20
	allocSmallSeg  int64 = 2 << 20
	allocMidLimit  int64 = 10 << 20
	allocMidSeg    int64 = 20 << 20
	allocRoundLg   int64 = 2 << 20
	allocRoundUnit int64 = 512
)

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// SegmentsFor is the reserved bytes of one allocator pool (one stream) in
// which the given requests are all live at once, allocated in order and
// never freed in between: large requests take their own 2 MiB-rounded
// segment, smaller ones are packed first-fit into shared 20 MiB or 2 MiB
// segments.
func SegmentsFor(requests []int64) int64 {
	var total int64
	var mid, small []int64 // free bytes left in each shared segment
	fit := func(free []int64, n, seg int64) []int64 {
		for i := range free {
			if free[i] >= n {
				free[i] -= n
				return free
			}
		}
		total += seg
		return append(free, seg-n)
	}
	for _, r := range requests {
		n := roundUp(max(r, 1), allocRoundUnit)
		switch {
		case n <= allocSmall:
			small = fit(small, n, allocSmallSeg)
		case n < allocMidLimit:
			mid = fit(mid, n, allocMidSeg)
		default:
			total += roundUp(n, allocRoundLg)
		}
	}
	return total
}

// PaddedNumel is one parameter's element count as FSDP2 stores it: dim 0
// padded to a multiple of the shard world (every rank holds an equal chunk).
func PaddedNumel(dim0, rest int64, world int) int64 {
	w := int64(max(world, 1))
	return roundUp(dim0, w) * rest
}

// FSDPPools describes the FSDP2 units of one model for FSDPStreamPools.
type FSDPPools struct {
	// Units are the units' padded element counts (Σ PaddedNumel of their
	// parameters), the root first (it is all-gathered first), then the
	// blocks.
	Units []int64
	// World is the shard world size.
	World int
	// GatherBytes is the all-gather dtype's size: MixedPrecisionPolicy's
	// param_dtype, else the parameters' own dtype.
	GatherBytes int64
	// ShardBytes is the sharded parameters' dtype size (4 for fp32 master
	// weights).
	ShardBytes int64
	// GradBytes is the sharded gradients' dtype size (the parameters' dtype;
	// a reduce_dtype that differs is upcast on the same stream).
	GradBytes int64
}

// FSDPStreamPools returns the reserved bytes of FSDP2's two extra allocator
// pools, which the default stream never reuses (docs/multigpu.md):
//
//   - allGather: the all-gather copy-in stream. The root's flat all-gather
//     output (GatherBytes × N_root) is the step's first request and keeps
//     its own segment; beside it one more request is live, the root's flat
//     cast input (GatherBytes × N_root / W, only when GatherBytes differs
//     from ShardBytes) or the next unit's output, whichever is larger. The
//     blocks' later outputs (two live with prefetch) reuse the root's
//     segment. Measured only where the root is the largest unit and two
//     block outputs fit in its segment; otherwise this under-counts.
//   - reduceScatter: the reduce-scatter stream. Every unit's sharded
//     gradient block (GradBytes × N_u / W) is live at the end of backward.
//
// Measured on 2xH200 to the MiB for GPT-2 124M and XL and Llama-3.2-1B in
// amp-bf16, bf16 and fsdp-bf16 (bench/results/2026-11-23-h200x2-dist.jsonl).
func FSDPStreamPools(p FSDPPools) (allGather, reduceScatter int64, err error) {
	if p.World < 1 || len(p.Units) == 0 || p.GatherBytes <= 0 || p.ShardBytes <= 0 || p.GradBytes <= 0 {
		return 0, 0, fmt.Errorf("fsdp pools: incomplete description %+v", p)
	}
	w := int64(p.World)
	var grads []int64
	var largestOther int64
	for i, n := range p.Units {
		if n < 0 {
			return 0, 0, fmt.Errorf("fsdp pools: unit %d has %d elements", i, n)
		}
		grads = append(grads, p.GradBytes*n/w)
		if i > 0 {
			largestOther = max(largestOther, p.GatherBytes*n)
		}
	}
	root := p.Units[0]
	beside := largestOther
	if p.GatherBytes != p.ShardBytes {
		beside = max(beside, p.GatherBytes*root/w)
	}
	allGather = SegmentsFor([]int64{p.GatherBytes * root})
	if beside > 0 {
		allGather += SegmentsFor([]int64{beside})
	}
	return allGather, SegmentsFor(grads), nil
}

package parallel_test

import (
	"fmt"

	"github.com/memplan/memplan/parallel"
)

func ExampleZeroPartition() {
	// An embedding, two layers and a norm over 2 ranks.
	p, _ := parallel.ZeroPartition([]int64{1000, 300, 300, 10}, 2)
	r, n := p.Busiest()
	fmt.Println(p.Numel, r, n, p.Spread())
	// Output: [1000 610] 0 1000 390
}

func ExampleDDPBuckets() {
	b, _ := parallel.DDPBuckets([]int64{512 << 10, 768 << 10, 20 << 20, 10 << 20}, parallel.DDPFirstBucketBytes, parallel.DDPBucketCapBytes)
	fmt.Println(b)
	// Output: [1310720 31457280]
}

func ExampleNCCLBytes() {
	n, _ := parallel.NCCLBytes(parallel.NCCL{Communicators: 1, Channels: 24, P2PChannels: 32})
	fmt.Println(n >> 20)
	// Output: 840
}

func ExampleFSDPStreamPools() {
	// A root of 10 M elements and two blocks of 2 M, fp32 master weights
	// gathered in bf16, over 2 GPUs.
	ag, rs, _ := parallel.FSDPStreamPools(parallel.FSDPPools{Units: []int64{10e6, 2e6, 2e6}, World: 2,
		GatherBytes: 2, ShardBytes: 4, GradBytes: 4})
	fmt.Println(ag>>20, rs>>20)
	// Output: 40 40
}

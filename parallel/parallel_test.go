package parallel

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

func TestZeroPartitionSmall(t *testing.T) {
	tests := []struct {
		name   string
		numels []int64
		world  int
		want   [][]int
		busy   int
	}{
		{"largest first, least loaded next", []int64{1, 5, 3, 4}, 2, [][]int{{1, 0}, {3, 2}}, 1},
		{"tie goes to the lowest rank", []int64{2, 2, 2}, 2, [][]int{{0, 2}, {1}}, 0},
		{"one rank", []int64{3, 1}, 1, [][]int{{0, 1}}, 0},
		{"more ranks than parameters", []int64{7}, 3, [][]int{{0}, nil, nil}, 0},
		{"stable among equal sizes", []int64{1, 4, 4, 1}, 2, [][]int{{1, 0}, {2, 3}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ZeroPartition(tc.numels, tc.world)
			if err != nil {
				t.Fatal(err)
			}
			for r := range tc.want {
				if len(p.Ranks[r]) != len(tc.want[r]) {
					t.Fatalf("rank %d got %v, want %v", r, p.Ranks[r], tc.want[r])
				}
				for i := range tc.want[r] {
					if p.Ranks[r][i] != tc.want[r][i] {
						t.Fatalf("rank %d got %v, want %v", r, p.Ranks[r], tc.want[r])
					}
				}
			}
			if r, _ := p.Busiest(); r != tc.busy {
				t.Errorf("busiest rank %d, want %d", r, tc.busy)
			}
		})
	}
}

func TestZeroPartitionErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		numels []int64
		world  int
	}{{"no ranks", []int64{1}, 0}, {"negative size", []int64{-1}, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ZeroPartition(tc.numels, tc.world); err == nil {
				t.Error("no error")
			}
		})
	}
}

// TestZeroPartitionMeasured compares with the partition torch 2.11's
// ZeroRedundancyOptimizer made on 2xH200 (bench/results/2026-11-23-h200x2-
// dist.jsonl): per rank, the element counts of its parameters in order.
func TestZeroPartitionMeasured(t *testing.T) {
	raw, err := os.ReadFile("testdata/zero1-2xh200.json")
	if err != nil {
		t.Fatal(err)
	}
	var runs []struct {
		Config string    `json:"config"`
		Order  []int64   `json:"order"`
		Ranks  [][]int64 `json:"ranks"`
	}
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) < 3 {
		t.Fatalf("%d measured runs, want 3", len(runs))
	}
	for _, run := range runs {
		t.Run(run.Config, func(t *testing.T) {
			p, err := ZeroPartition(run.Order, len(run.Ranks))
			if err != nil {
				t.Fatal(err)
			}
			for r, want := range run.Ranks {
				if len(p.Ranks[r]) != len(want) {
					t.Fatalf("rank %d: %d parameters, want %d", r, len(p.Ranks[r]), len(want))
				}
				var sum int64
				for i, idx := range p.Ranks[r] {
					if run.Order[idx] != want[i] {
						t.Fatalf("rank %d parameter %d: %d elements, want %d", r, i, run.Order[idx], want[i])
					}
					sum += want[i]
				}
				if p.Numel[r] != sum {
					t.Errorf("rank %d: %d elements, want %d", r, p.Numel[r], sum)
				}
			}
		})
	}
}

// gpt2Grads is GPT-2 124M's parameters in model.parameters() order (wte
// tied with lm_head, so once), fp32 bytes.
func gpt2Grads() []int64 {
	g := []int64{50257 * 768, 1024 * 768}
	for range 12 {
		g = append(g, 768, 768, 768*2304, 2304, 768*768, 768, 768, 768, 768*3072, 3072, 3072*768, 768)
	}
	g = append(g, 768, 768)
	for i := range g {
		g[i] *= 4
	}
	return g
}

func TestDDPBuckets(t *testing.T) {
	layer := int64(28351488)
	gpt2 := []int64{9446400}
	for range 11 {
		gpt2 = append(gpt2, layer)
	}
	gpt2 = append(gpt2, 176446464)
	tests := []struct {
		name  string
		grads []int64
		first int64
		cap   int64
		want  []int64
	}{
		// Measured: _get_ddp_logging_data()["rebuilt_bucket_sizes"], GPT-2
		// 124M fp32 grads on 2xH200 (bench/results/2026-11-23-h200x2-dist.jsonl).
		{"gpt2-124m rebuilt, reverse order", ReverseOrder(gpt2Grads()), DDPFirstBucketBytes, DDPBucketCapBytes, gpt2},
		// The first iteration: one bucket of everything (measured 497759232).
		{"first iteration", gpt2Grads(), 1 << 62, 1 << 62, []int64{497759232}},
		// Llama-3.2-1B's grad-ready order for the last layer (norm, down,
		// up, gate, post-norm, o, v, k, q), measured 67117056, 67108864,
		// 67108864, 41951232.
		{"llama last layer, ready order", []int64{8192, 67108864, 67108864, 67108864, 8192, 16777216, 4194304, 4194304, 16777216},
			DDPFirstBucketBytes, DDPBucketCapBytes, []int64{67117056, 67108864, 67108864, 41951232}},
		{"empty", nil, 1, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DDPBuckets(tc.grads, tc.first, tc.cap)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("bucket %d: got %d, want %d (all %v)", i, got[i], tc.want[i], got)
				}
			}
		})
	}
	if _, err := DDPBuckets([]int64{1}, 0, 1); err == nil {
		t.Error("zero limit: no error")
	}
}

func TestNCCLBytesMeasured(t *testing.T) {
	const mib = 1 << 20
	// NCCL memory after the first collective(s), measured on 2xH200 NV18,
	// NCCL 2.28.9 (bench/results/2026-11-23-h200x2-nccl.jsonl: device used
	// minus the caching allocator's reserved, minus the 620 MiB in use
	// after the first tensor).
	tests := []struct {
		name string
		c    NCCL
		want int64
	}{
		{"default", NCCL{Communicators: 1, Channels: 24, P2PChannels: 32}, 840 * mib},
		{"3 groups", NCCL{Communicators: 3, Channels: 24, P2PChannels: 32}, (1936 - 126) * mib},
		{"buffsize 1MiB", NCCL{Communicators: 1, Channels: 24, P2PChannels: 32, BuffSize: 1 << 20}, 792 * mib},
		{"buffsize 8MiB", NCCL{Communicators: 1, Channels: 24, P2PChannels: 32, BuffSize: 8 << 20}, 936 * mib},
		{"4 channels", NCCL{Communicators: 1, Channels: 4, P2PChannels: 4}, 432 * mib},
		{"8 channels, 3 groups", NCCL{Communicators: 3, Channels: 8, P2PChannels: 8}, (880 - 78) * mib},
		{"16 channels", NCCL{Communicators: 1, Channels: 16, P2PChannels: 16}, 648 * mib},
		{"sender", NCCL{Communicators: 1, Channels: 24, P2PChannels: 32, SendPeers: 1}, (966 - 4) * mib},
		{"receiver", NCCL{Communicators: 1, Channels: 24, P2PChannels: 32, RecvPeers: 1}, (1222 - 4) * mib},
		{"receiver, 4 channels", NCCL{Communicators: 1, Channels: 4, P2PChannels: 4, RecvPeers: 1}, (534 - 4) * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NCCLBytes(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if d := got - tc.want; d > 4*mib || d < -4*mib {
				t.Errorf("got %d MiB, measured %d MiB", got/mib, tc.want/mib)
			}
		})
	}
}

// TestNCCLBytesPeers holds the point-to-point buffers per peer against
// training runs on 4 x H200 (bench/results/2026-11-26-h200x4-layouts.jsonl,
// and the expert-parallel runs of 2026-11-26-h200x4-ep.jsonl, whose group
// has a communicator of its own that runs only all-to-alls): device in use
// less reserved, less the 770 MiB that a data-parallel run holds besides
// NCCL's 840 (the CUDA context and the modules loaded during training,
// docs/multigpu.md).
func TestNCCLBytesPeers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noRing     int
		send, recv int
		want       int64
	}{
		{"context parallel all-to-all over 4 ranks (cp.py 4)", 0, 3, 3, (2827 - 770) * mib},
		{"scatter's source to 3 ranks (tp.py 4, rank 0)", 0, 3, 0, (1867 - 770) * mib},
		{"scatter's receiver (tp.py 4, ranks 1-3)", 0, 0, 1, (1995 - 770) * mib},
		{"expert parallelism over 2 ranks (train.py --ep 2, 2 and 4 GPUs)", 1, 1, 1, (2252 - 770) * mib},
		{"expert parallelism over 4 ranks (train.py --ep 4)", 1, 3, 3, (3020 - 770) * mib},
		// FSDP2 with dp = ep: the experts' one-rank group connects no ring
		// either (2026-11-26-h200x4-ep-fsdp.jsonl, 2 and 4 GPUs).
		{"FSDP2 and expert parallelism over 2 ranks, experts over one", 2, 1, 1, (2444 - 770) * mib},
		{"FSDP2 and expert parallelism over 4 ranks, experts over one", 2, 3, 3, (3212 - 770) * mib},
	} {
		c := NCCL{Communicators: 1, NoRing: tc.noRing, Channels: 24, P2PChannels: 32}
		c.SendPeers, c.RecvPeers = tc.send, tc.recv
		got, err := NCCLBytes(c)
		if err != nil {
			t.Fatal(err)
		}
		if d := got - tc.want; d > 8*mib || d < -8*mib {
			t.Errorf("%s: got %d MiB, measured %d MiB", tc.name, got/mib, tc.want/mib)
		}
	}
}

func TestNCCLBytesEdges(t *testing.T) {
	if n, err := NCCLBytes(NCCL{}); err != nil || n != 0 {
		t.Errorf("no communicator: %d, %v", n, err)
	}
	for _, c := range []NCCL{{Communicators: 1}, {NoRing: 1}, {Communicators: -1, Channels: 1}, {NoRing: -1, Channels: 1}} {
		if _, err := NCCLBytes(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if RecvBufferBytes(0) != 10<<20 || RecvBufferBytes(1<<20) != 8<<20 || RecvBufferBytes(8<<20) != 14<<20 {
		t.Errorf("receive buffers %d %d %d", RecvBufferBytes(0), RecvBufferBytes(1<<20), RecvBufferBytes(8<<20))
	}
}

func TestAssignBuckets(t *testing.T) {
	tests := []struct {
		name   string
		bytes  []int64
		keys   []int
		limits []int64
		ready  bool
		want   [][]int
	}{
		// DDP's init broadcast of Llama-3.2-1B in fp32 (250 MiB buckets):
		// the 1,002 MiB embedding alone, then layers' tensors until a
		// bucket reaches the limit.
		{"broadcast", []int64{1002 << 20, 100 << 20, 100 << 20, 60 << 20, 10 << 20}, nil, []int64{250 << 20}, false,
			[][]int{{0}, {1, 2, 3}, {4}}},
		// Two kinds: each fills its own bucket; sorted by smallest index.
		{"kinds sorted", []int64{4, 8, 4, 8, 4}, []int{1, 2, 1, 2, 1}, []int64{8}, false,
			[][]int{{0, 2}, {1}, {3}, {4}}},
		// Ready order: buckets keep the order they closed in, the open
		// remainder last.
		{"kinds ready", []int64{4, 8, 4, 8, 4}, []int{1, 2, 1, 2, 1}, []int64{8}, true,
			[][]int{{1}, {0, 2}, {3}, {4}}},
		// The first limit for each kind's first bucket, then the next.
		{"limits advance", []int64{1, 1, 3, 2, 2}, nil, []int64{1, 4}, true,
			[][]int{{0}, {1, 2}, {3, 4}}},
		{"empty", nil, nil, []int64{1}, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AssignBuckets(tc.bytes, tc.keys, tc.limits, tc.ready)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []struct {
		bytes  []int64
		keys   []int
		limits []int64
	}{{[]int64{1}, nil, nil}, {[]int64{1}, nil, []int64{0}}, {[]int64{-1}, nil, []int64{1}}, {[]int64{1}, []int{1, 2}, []int64{1}}} {
		if _, err := AssignBuckets(bad.bytes, bad.keys, bad.limits, true); err == nil {
			t.Errorf("AssignBuckets(%v, %v, %v): no error", bad.bytes, bad.keys, bad.limits)
		}
	}
}

// TestNCCLPipelineNeighbour: a pipeline stage's send/recv to a neighbour
// adds 157 MiB (the first send/recv's one-off and its buffers), and only
// 99 MiB on a rank whose all-to-all has paid the one-off (measured:
// bench/results/2026-11-27-h200x4-pp-moe-ep.jsonl, 385 MiB above the same
// pipeline without expert parallelism, one peer's buffers; TestPipelineAccuracy
// in package bench holds those runs).
func TestNCCLPipelineNeighbour(t *testing.T) {
	for _, c := range []struct {
		name string
		c    NCCL
		want int64
	}{
		{"alone", NCCL{Communicators: 2, Channels: 24, P2PChannels: 32}, 157 * mib},
		{"with an all-to-all", NCCL{Communicators: 2, NoRing: 1, Channels: 24, P2PChannels: 32, SendPeers: 1, RecvPeers: 1}, 99 * mib},
	} {
		without, err := NCCLBytes(c.c)
		if err != nil {
			t.Fatal(err)
		}
		c.c.PipelineNeighbour = true
		with, err := NCCLBytes(c.c)
		if err != nil {
			t.Fatal(err)
		}
		if with-without != c.want {
			t.Errorf("%s: a pipeline neighbour adds %d MiB, want %d", c.name, (with-without)/mib, c.want/mib)
		}
	}
}

package estimate

import (
	"path/filepath"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestSharding checks the per-GPU effect of data parallelism, each ZeRO
// stage and offload on a model whose state dominates: each stage holds
// less than the one before, the sharded parts shrink by the world size,
// DDP (and ZeroRedundancyOptimizer over it) adds its gradient buckets.
func TestSharding(t *testing.T) {
	load := func(o model.Overrides) *Result {
		t.Helper()
		o.Batch, o.Checkpointing = 1, "every-block"
		return estimateSpec(t, "llama-3.2-1b.yaml", o)
	}
	one := load(model.Overrides{})
	ddp := load(model.Overrides{DP: 8})
	if got, want := ddp.PeakAllocated-one.PeakAllocated, one.GradBytes; got < want {
		t.Errorf("DDP adds %d bytes per GPU, want at least the gradient buckets (%d)", got, want)
	}
	prev := ddp
	for z := 1; z <= 3; z++ {
		r := load(model.Overrides{DP: 8, Zero: string(rune('0' + z))})
		if r.PeakAllocated >= prev.PeakAllocated {
			t.Errorf("ZeRO-%d peak %d, not below stage %d's %d", z, r.PeakAllocated, z-1, prev.PeakAllocated)
		}
		// Stage 1 assigns whole parameters to ranks: the busiest rank
		// holds the 262M-parameter embedding's state, more than an eighth.
		want := (one.OptimizerBytes + 7) / 8
		if z == 1 {
			want = 2 * 4 * 128256 * 2048 // fp32 exp_avg and exp_avg_sq of the embedding
		}
		if abs64(r.OptimizerBytes-want) > want/100 {
			t.Errorf("ZeRO-%d optimizer state %d, want about %d", z, r.OptimizerBytes, want)
		}
		if z >= 2 && abs64(r.GradBytes-one.GradBytes/8) > one.GradBytes/800 {
			t.Errorf("ZeRO-%d gradients %d, want about %d", z, r.GradBytes, one.GradBytes/8)
		}
		if z == 3 && abs64(r.ParamBytes-one.ParamBytes/8) > one.ParamBytes/800 {
			t.Errorf("ZeRO-3 parameters %d, want about %d", r.ParamBytes, one.ParamBytes/8)
		}
		prev = r
	}
	off := load(model.Overrides{DP: 8, Zero: "2", Offload: "optimizer"})
	if off.OptimizerBytes != 0 || off.PeakAllocated >= load(model.Overrides{DP: 8, Zero: "2"}).PeakAllocated {
		t.Errorf("offload optimizer: state %d on the GPU, peak %d", off.OptimizerBytes, off.PeakAllocated)
	}
	inf := load(model.Overrides{DP: 8, Zero: "3", Offload: "params"})
	if inf.ParamBytes != 0 || inf.PeakAllocated >= prev.PeakAllocated {
		t.Errorf("offload params: %d parameter bytes on the GPU, peak %d", inf.ParamBytes, inf.PeakAllocated)
	}
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestNCCLOverhead checks that a data-parallel run, and only one, carries
// NCCL's memory on its own line of the overheads and in the device total.
func TestNCCLOverhead(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    model.Overrides
		want int64
	}{
		{"single GPU", model.Overrides{}, 0},
		{"ddp", model.Overrides{DP: 2}, 840 << 20},
		{"zero1", model.Overrides{DP: 2, Zero: "1"}, 840 << 20},
		{"fsdp", model.Overrides{DP: 2, Zero: "3"}, 840 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Batch, tc.o.Seq = 1, 128
			s, err := model.Load(filepath.Join("..", "specs", "gpt2-124m.yaml"), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Estimate(s)
			if err != nil {
				t.Fatal(err)
			}
			var got, sum int64
			for _, o := range r.Overhead {
				sum += o.Bytes
				if o.Name == OverheadNCCL {
					got = o.Bytes
				}
			}
			if got != tc.want {
				t.Errorf("NCCL overhead %d, want %d", got, tc.want)
			}
			if r.DeviceTotal != r.PeakReserved+sum {
				t.Errorf("device total %d != reserved %d + overheads %d", r.DeviceTotal, r.PeakReserved, sum)
			}
		})
	}
}

// TestFSDPBF16 checks fsdp-bf16's states: fp32 shards, gradient shards and
// optimizer state (twice pure bf16's), bf16 activations (pure bf16's, not
// autocast's).
func TestFSDPBF16(t *testing.T) {
	est := func(prec string) *Result {
		t.Helper()
		return estimateSpec(t, "gpt2-124m.yaml", model.Overrides{Batch: 1, Seq: 128, DP: 2, Zero: "3", Precision: prec})
	}
	bf, mp := est("bf16"), est("fsdp-bf16")
	if mp.OptimizerBytes != 2*bf.OptimizerBytes || mp.GradBytes != 2*bf.GradBytes {
		t.Errorf("fsdp-bf16 optimizer %d, gradients %d; want twice bf16's %d, %d",
			mp.OptimizerBytes, mp.GradBytes, bf.OptimizerBytes, bf.GradBytes)
	}
	if mp.ActivationBytes != bf.ActivationBytes {
		t.Errorf("fsdp-bf16 activations %d, want pure bf16's %d", mp.ActivationBytes, bf.ActivationBytes)
	}
}

// TestBucketView checks DDP's gradient_as_bucket_view: the gradients are
// slices of the buckets, so a checkpointed run, whose peak comes late in
// the backward, holds one copy of the gradients less.
func TestBucketView(t *testing.T) {
	est := func(view bool) *Result {
		t.Helper()
		return estimateSpec(t, "gpt2-124m.yaml", model.Overrides{Batch: 1, Seq: 128, DP: 2, Checkpointing: "every-block", BucketView: view})
	}
	plain, view := est(false), est(true)
	if got, want := plain.PeakAllocated-view.PeakAllocated, plain.GradBytes*9/10; got < want {
		t.Errorf("bucket view saves %d B at the peak, want about the gradients (%d B)", got, plain.GradBytes)
	}
}

// TestZeroRanks checks that a ZeRO-1 run names its busiest rank and the
// spread when the partition is uneven, and that the result is that rank's.
func TestZeroRanks(t *testing.T) {
	s, err := model.Load(filepath.Join("..", "specs", "gpt2-124m.yaml"),
		model.Overrides{Batch: 1, Seq: 128, DP: 3, Zero: "1"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Estimate(s)
	if err != nil {
		t.Fatal(err)
	}
	k := r.Ranks
	if k == nil {
		t.Fatal("no ranks for an uneven ZeRO-1 partition")
	}
	if len(k.OptimizerBytes) != 3 || k.OptimizerBytes[k.Busiest] != r.OptimizerBytes || k.DeviceTotal[k.Busiest] != r.DeviceTotal {
		t.Errorf("ranks %+v: the busiest rank's figures should be the result's (%d, %d)", k, r.OptimizerBytes, r.DeviceTotal)
	}
	for i, b := range k.OptimizerBytes {
		if b > r.OptimizerBytes || r.OptimizerBytes-b > k.Spread {
			t.Errorf("rank %d holds %d B, outside [busiest - spread, busiest]", i, b)
		}
	}
	if k.Spread <= 0 {
		t.Errorf("spread %d, want > 0", k.Spread)
	}
}

package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestContextParallel checks the lowering's effects against one GPU at the
// rank's share of the sequence, on Llama-3.2-1B (h 2048, 32 heads of 64, 8
// key/value heads, 16 layers): the parameters are whole; each layer saves
// the repeated keys and values (all heads, not the key/value heads) and the
// copy of the head-major ring output that the output projection saves,
// and nothing else more; NCCL adds the cp communicator and the
// all-to-all's point-to-point buffers; FSDP shards over dp·cp.
func TestContextParallel(t *testing.T) {
	est := func(o model.Overrides) *Result { return estimateSpec(t, "llama-3.2-1b.yaml", o) }
	const b, s, c, h, kvd, layers = 2, 4096, 2, 2048, 512, 16
	half := est(model.Overrides{Batch: b, Seq: s / c, Precision: "amp-bf16"})
	cp := est(model.Overrides{Batch: b, Seq: s, CP: c, Precision: "amp-bf16"})
	if cp.ParamBytes != half.ParamBytes {
		t.Errorf("cp parameter bytes = %d, want one GPU's %d", cp.ParamBytes, half.ParamBytes)
	}
	rows := int64(b * s / c)
	perLayer := 2*rows*(h-kvd)*2 + rows*h*2 // repeat_kv's extra heads (bf16), the output copy
	if got, want := cp.ActivationBytes-half.ActivationBytes, layers*perLayer; got != want {
		t.Errorf("cp activations exceed one GPU's at s/c by %d, want %d (repeated k, v and the output copy per layer)", got, want)
	}
	if cp.Training.Seq != s {
		t.Errorf("reported sequence %d, want the run's %d", cp.Training.Seq, s)
	}
	if got, want := ncclOf(cp), int64(840+442)<<20; got != want {
		t.Errorf("cp NCCL = %d, want %d (one communicator, 840 MiB; sends and receives, 442 MiB)", got, want)
	}
	fsdp := est(model.Overrides{Batch: b, Seq: s, CP: c, DP: 2, Zero: "3", Precision: "amp-bf16"})
	if got, want := fsdp.ParamBytes, (cp.ParamBytes+3)/4; got > want+4<<20 || got < want-4<<20 {
		t.Errorf("FSDP over dp·cp = 4 parameter bytes %d, want about %d", got, want)
	}
	for _, o := range []model.Overrides{
		{Batch: b, Seq: s, CP: c, DP: 2, Precision: "amp-bf16"},
		{Batch: b, Seq: s + 2, CP: c, Precision: "amp-bf16"},
	} {
		if _, err := model.Load("../specs/llama-3.2-1b.yaml", o); err == nil {
			t.Errorf("Load(%+v) = nil error, want a refusal", o)
		}
	}
}

// ncclOf is a result's NCCL memory outside the allocator.
func ncclOf(r *Result) int64 {
	for _, o := range r.Overhead {
		if o.Name == OverheadNCCL {
			return o.Bytes
		}
	}
	return -1
}

package estimate

import (
	"fmt"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// rankRun simulates one rank of a pipeline-parallel TinyLlama run
// (seq 512, micro-batch 1) and returns its result, the pipeline buffers
// it held at the end, and its stages.
func rankRun(t *testing.T, o model.Overrides, rank int64) (*Result, int64, *pipeline) {
	t.Helper()
	if o.Seq == 0 {
		o.Seq = 512
	}
	o.Batch, o.Precision, o.Optimizer = 1, "amp-bf16", "adamw-foreach"
	spec := load(t, "tinyllama-1.1b.yaml", o)
	p, err := newPipeline(spec, rank)
	if err != nil {
		t.Fatal(err)
	}
	var pipe int64
	r, err := simulateRank(spec, func(s *sim) { pipe = s.live[catPipe] }, func(s *sim) { s.pp = p })
	if err != nil {
		t.Fatal(err)
	}
	return r, pipe, p
}

// TestPipelineInterleaved checks a rank of the interleaved schedule: it
// holds its stages round robin, each with its own receive buffers (one per
// micro-batch for the input of every stage but the first, one for the
// output's gradient of every stage but the last), and every forward it
// runs has its backward by the end of the step.
func TestPipelineInterleaved(t *testing.T) {
	const boundary = 1 * 512 * 2048 * f32
	for _, tc := range []struct {
		pp, v, m, rank int64
		stages         []int64
		buffers        int64
	}{
		{2, 2, 4, 0, []int64{0, 2}, 3 * 4},
		{2, 2, 4, 1, []int64{1, 3}, 3 * 4},
		{2, 3, 2, 0, []int64{0, 2, 4}, 5 * 2},
		{4, 2, 8, 2, []int64{2, 6}, 4 * 8},
	} {
		t.Run(fmt.Sprintf("pp%d-v%d-m%d-rank%d", tc.pp, tc.v, tc.m, tc.rank), func(t *testing.T) {
			o := model.Overrides{PP: tc.pp, PPSchedule: model.PPInterleaved, PPVirtual: tc.v, GradAccum: tc.m}
			_, pipe, p := rankRun(t, o, tc.rank)
			var got []int64
			for _, q := range p.local {
				got = append(got, q.stage)
				if len(q.flights) != 0 {
					t.Errorf("stage %d ends with %d micro-batches in flight", q.stage, len(q.flights))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.stages) {
				t.Errorf("rank %d holds stages %v, want %v", tc.rank, got, tc.stages)
			}
			if pipe != tc.buffers*boundary {
				t.Errorf("pipeline buffers %d B, want %d boundaries of %d B", pipe, tc.buffers, boundary)
			}
		})
	}
}

// TestPipelineInterleavedBusiest checks the interleaved estimate: one
// kind per rank (the first holds stage 0, the last the last stage), their
// blocks and parameters the model's, the busiest reported.
func TestPipelineInterleavedBusiest(t *testing.T) {
	r := estimateSpec(t, "tinyllama-1.1b.yaml", model.Overrides{PP: 2, PPSchedule: model.PPInterleaved, PPVirtual: 2, GradAccum: 4, Seq: 512, Batch: 1})
	p := r.Pipeline
	if p == nil || len(p.Kinds) != 2 || p.Virtual != 2 {
		t.Fatalf("pipeline = %+v, want two ranks of two stages", p)
	}
	if b := p.Kinds[0].Blocks + p.Kinds[1].Blocks; b != 22 {
		t.Errorf("ranks hold %d + %d blocks, want 22", p.Kinds[0].Blocks, p.Kinds[1].Blocks)
	}
	if p.Kinds[0].Params+p.Kinds[1].Params != r.Params {
		t.Errorf("ranks hold %d + %d parameters, want the model's %d", p.Kinds[0].Params, p.Kinds[1].Params, r.Params)
	}
	if r.DeviceTotal != max(p.Kinds[0].DeviceTotal, p.Kinds[1].DeviceTotal) {
		t.Errorf("device total %d, want the busiest rank's", r.DeviceTotal)
	}
}

// TestPipelineTensorParallel checks tensor parallelism inside pipeline
// stages: each stage is the tensor-parallel lowering of its layers, so
// the stages' parameters add up to one tensor-parallel rank's, and NCCL
// has the tensor-parallel communicator beside the pipeline's.
func TestPipelineTensorParallel(t *testing.T) {
	o := model.Overrides{PP: 2, PPSchedule: model.PP1F1B, GradAccum: 2, TP: 2, SP: true, Seq: 512, Batch: 1}
	spec := load(t, "tinyllama-1.1b.yaml", o)
	prog, err := spec.Model.LowerRank(&spec.Training)
	if err != nil {
		t.Fatal(err)
	}
	r := estimateSpec(t, "tinyllama-1.1b.yaml", o)
	p := r.Pipeline
	if p == nil || len(p.Kinds) != 2 {
		t.Fatalf("pipeline = %+v", p)
	}
	if got, want := p.Kinds[0].Params+p.Kinds[1].Params, model.Params(prog); got != want {
		t.Errorf("stages hold %d parameters, a tensor-parallel rank %d", got, want)
	}
	// The pipeline's, the tensor-parallel and the default group's
	// communicators (the stages' DTensor parameters are drawn on the GPU:
	// the random-number tracker's broadcast runs on the default group),
	// and one neighbour's point-to-point buffers: 1,969 MiB, as measured
	// on 4 × H200 (device less reserved 2,739 MiB on every rank, less the
	// context's 770).
	c := parallel.H200x2Defaults
	c.Communicators = 3
	want := mustNCCL(parallel.NCCLBytes(c)) + (58+99)<<20
	for _, ov := range r.Overhead {
		if ov.Name == OverheadNCCL && ov.Bytes != want {
			t.Errorf("NCCL %d MiB, want %d (pipeline, tensor-parallel and default communicators, one neighbour)", ov.Bytes>>20, want>>20)
		}
	}
	// With sequence parallelism the residual stream between modules is
	// the sequence's shard: so are the stage boundary and its buffers.
	_, pipe, _ := rankRun(t, o, 1)
	if want := int64(2 * 1 * 256 * 2048 * f32); pipe != want {
		t.Errorf("last stage's receive buffers %d B, want %d (s/t = 256 tokens)", pipe, want)
	}
	// Loss parallelism keeps the last stage's logits sharded: less than
	// gathering them.
	o.LossParallel = true
	lp := estimateSpec(t, "tinyllama-1.1b.yaml", o)
	if a, b := lp.Pipeline.Kinds[1].PeakAllocated, p.Kinds[1].PeakAllocated; a >= b {
		t.Errorf("last stage with loss parallelism %d B, gathered logits %d B: want less", a, b)
	}
}

// TestPipelineContextParallel checks context parallelism inside pipeline
// stages: the stage boundary, and so the receive buffers, are the rank's
// share of the sequence.
func TestPipelineContextParallel(t *testing.T) {
	const m = 4
	_, pipe, p := rankRun(t, model.Overrides{PP: 2, PPSchedule: model.PP1F1B, GradAccum: m, CP: 2, Seq: 1024}, 1)
	if want := int64(m * 1 * 512 * 2048 * f32); pipe != want {
		t.Errorf("last stage's receive buffers %d B, want %d (s/c = 512 tokens)", pipe, want)
	}
	ring := 0
	var walk func([]model.Layer)
	walk = func(ls []model.Layer) {
		for _, l := range ls {
			if _, ok := l.Spec.(*model.RingAttention); ok {
				ring++
			}
			walk(l.Body)
		}
	}
	walk(p.layers)
	if ring == 0 {
		t.Errorf("the stage has no ring attention")
	}
}

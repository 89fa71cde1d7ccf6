package estimate

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// stageRun simulates one stage of a pipeline-parallel TinyLlama run and
// returns its result with what the simulation held at its end.
func stageRun(t *testing.T, o model.Overrides, stage int64) (r *Result, pipe int64, saved int64) {
	t.Helper()
	o.Seq, o.Batch, o.Precision, o.Optimizer = 512, 1, "amp-bf16", "adamw-foreach"
	spec := load(t, "tinyllama-1.1b.yaml", o)
	p, err := newPipeline(spec, stage)
	if err != nil {
		t.Fatal(err)
	}
	r, err = simulateRank(spec, func(s *sim) { pipe, saved = s.live[catPipe], s.saved }, func(s *sim) { s.pp = p })
	if err != nil {
		t.Fatal(err)
	}
	return r, pipe, saved
}

// TestPipelineInFlight checks that the schedules are replayed, not
// multiplied: GPipe holds every micro-batch's activations at the end of
// its last forward, 1F1B at most pp − stage of them whatever the
// micro-batches (docs/parallelism.md §3.2).
func TestPipelineInFlight(t *testing.T) {
	saved := func(sched string, m, stage int64) int64 {
		_, _, s := stageRun(t, model.Overrides{PP: 2, PPSchedule: sched, GradAccum: m}, stage)
		return s
	}
	g1, g2, g4 := saved("gpipe", 1, 0), saved("gpipe", 2, 0), saved("gpipe", 4, 0)
	if per := g2 - g1; per <= 0 || g4-g2 != 2*per {
		t.Errorf("gpipe stage 0 saved %d, %d, %d B for 1, 2, 4 micro-batches: want a constant step per micro-batch", g1, g2, g4)
	}
	for _, m := range []int64{2, 4, 8} {
		// The token ids of the whole batch, which the embedding's saved
		// slices keep alive, grow with the micro-batches.
		ids := (m - 2) * 512 * i64
		if got := saved("1f1b", m, 0) - ids; got != g2 {
			t.Errorf("1f1b stage 0 with %d micro-batches saved %d B besides the ids, want gpipe's with 2 in flight, %d B", m, got, g2)
		}
	}
	if last, one := saved("1f1b", 4, 1), saved("gpipe", 1, 1); last != one {
		t.Errorf("1f1b last stage saved %d B, want one micro-batch's, %d B", last, one)
	}
}

// TestPipelineBuffers checks _PipelineStage's receive buffers: one
// [b, s, h] fp32 activation buffer per micro-batch on every stage but the
// first, one gradient buffer per micro-batch on every stage but the last,
// kept after the step.
func TestPipelineBuffers(t *testing.T) {
	const boundary = 1 * 512 * 2048 * f32
	for _, tc := range []struct {
		pp, stage, m, want int64
	}{
		{2, 0, 4, 4 * boundary},
		{2, 1, 4, 4 * boundary},
		{3, 1, 3, 2 * 3 * boundary},
		{3, 2, 5, 5 * boundary},
	} {
		_, pipe, _ := stageRun(t, model.Overrides{PP: tc.pp, PPSchedule: "1f1b", GradAccum: tc.m}, tc.stage)
		if pipe != tc.want {
			t.Errorf("pp %d stage %d, %d micro-batches: pipeline buffers %d B, want %d", tc.pp, tc.stage, tc.m, pipe, tc.want)
		}
	}
}

// TestShapeInferenceInput: _shape_inference binds the zeros it makes for
// the stage's input to a local until it returns, so the input outlives the
// stage's whole no-grad forward and goes before its output (measured:
// the later stages of Llama 4, Gemma 2, SmolLM3 and TinyLlama free it as
// _prepare_forward_infra returns, bench/results/2026-11-28-h200x4-pp-llama4-traces).
func TestShapeInferenceInput(t *testing.T) {
	o := model.Overrides{PP: 2, PPSchedule: "1f1b", GradAccum: 2, Seq: 512, Batch: 1, Precision: "amp-bf16", Optimizer: "adamw-foreach"}
	spec := load(t, "tinyllama-1.1b.yaml", o)
	p, err := newPipeline(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	_, err = simulateRank(spec, nil, func(s *sim) {
		s.pp = p
		s.trace = func(x *tensor, alloc bool) {
			if s.phase.Stage != "pipeline setup" || x.bytes() < 1<<20 {
				return
			}
			a := "free "
			if alloc {
				a = "alloc "
			}
			events = append(events, a+x.name)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	in := slices.Index(events, "free shape inference input")
	if in < 0 {
		t.Fatalf("no shape inference input freed in the setup: %v", events)
	}
	// After it only the forward's output goes, then the receive buffers
	// come: no product of the forward is made once the input is gone.
	for _, e := range events[in+1:] {
		if strings.HasPrefix(e, "alloc ") && !strings.HasPrefix(e, "alloc pipeline") {
			t.Fatalf("%q after the shape inference input was freed: %v", e, events[in:])
		}
	}
	if !slices.Contains(events[in:], "free matmul out") {
		t.Errorf("the forward's output is not freed after its input: %v", events[in:])
	}
}

// TestPipelineBusiest checks that Estimate simulates every stage and
// reports the busiest, with each kind and the pipeline's NCCL memory.
func TestPipelineBusiest(t *testing.T) {
	r := estimateSpec(t, "tinyllama-1.1b.yaml", model.Overrides{PP: 3, PPSchedule: "gpipe", GradAccum: 2, Seq: 512, Batch: 1})
	p := r.Pipeline
	if p == nil || len(p.Kinds) != 3 {
		t.Fatalf("pipeline = %+v, want three kinds of stage", p)
	}
	var most int64
	for i, k := range p.Kinds {
		if want := []string{KindFirst, KindMiddle, KindLast}[i]; k.Kind != want {
			t.Errorf("kind %d = %s, want %s", i, k.Kind, want)
		}
		most = max(most, k.DeviceTotal)
	}
	if r.DeviceTotal != most || p.Kinds[p.Busiest].DeviceTotal != most {
		t.Errorf("device total %d, busiest stage %d; want the kinds' largest, %d", r.DeviceTotal, p.Busiest, most)
	}
	if r.Params != 1_100_048_384 || p.Kinds[0].Params+p.Kinds[1].Params+p.Kinds[2].Params != r.Params {
		t.Errorf("parameters %d, by stage %d + %d + %d: want the model's, split", r.Params, p.Kinds[0].Params, p.Kinds[1].Params, p.Kinds[2].Params)
	}
	want := int64(840+58+99) << 20
	if p.Busiest == 1 {
		want += 99 << 20 // a middle stage has two neighbours
	}
	for _, o := range r.Overhead {
		if o.Name == OverheadNCCL && o.Bytes != want {
			t.Errorf("NCCL %d MiB on stage %d, want %d", o.Bytes>>20, p.Busiest, want>>20)
		}
	}
}

// TestPipelineFSDP checks FSDP under a pipeline: gradients are kept whole
// (set_requires_gradient_sync(False)) until the step's last backward, so at
// a backward peak the stage holds every gradient whole, and the optimizer
// state is sharded.
func TestPipelineFSDP(t *testing.T) {
	r, _, _ := stageRun(t, model.Overrides{PP: 2, PPSchedule: "1f1b", GradAccum: 4, DP: 2, Zero: "3"}, 0)
	if r.PeakPhase.Stage != StageBackward {
		t.Fatalf("peak in %v, want a backward", r.PeakPhase)
	}
	var grads int64
	for _, it := range r.AtPeak {
		if it.Name == catNames[catGrad] {
			grads = it.Bytes
		}
	}
	stage := int64(550_023_168) * f32
	if grads != stage || r.OptimizerBytes != stage {
		t.Errorf("gradients at the peak %d B, optimizer state %d B; want the stage's whole fp32 gradients and two sharded moments, %d B each", grads, r.OptimizerBytes, stage)
	}
}

// TestPipelineTiedNCCL: a tied model's pipeline (Megatron-LM's split,
// model's stageSlice) gives the ranks of its first and last stages one
// more NCCL communicator, the embedding group's, and the middle ones none;
// the last stage's head holds a weight of its own, as an untied model's.
func TestPipelineTiedNCCL(t *testing.T) {
	o := model.Overrides{Seq: 256, Batch: 1, PP: 4, GradAccum: 4}
	tied := load(t, "llama-3.2-1b.yaml", o)
	untied := *tied
	untied.Model.Tied = false
	c := parallel.H200x2Defaults
	one := mustNCCL(parallel.NCCLBytes(c))
	c.Communicators++
	comm := mustNCCL(parallel.NCCLBytes(c)) - one
	for st := int64(0); st < 4; st++ {
		p, err := newPipeline(tied, st)
		if err != nil {
			t.Fatal(err)
		}
		q, err := newPipeline(&untied, st)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		if st == 0 || st == 3 {
			want = comm
		}
		if d := pipelineNCCL(p, tied.Training) - pipelineNCCL(q, untied.Training); d != want {
			t.Errorf("stage %d: tied holds %d B more NCCL memory, want %d", st, d, want)
		}
		if a, b := model.Params(p.layers), model.Params(q.layers); a != b {
			t.Errorf("stage %d: tied %d parameters, untied %d", st, a, b)
		}
	}
	r, err := Estimate(tied)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Notes) == 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "tied embeddings: split as Megatron-LM splits them") {
		t.Errorf("notes %q: want the tied split's", r.Notes)
	}
}

// TestByCastOrder checks the order in which a micro-batch's backward runs
// the ToCopy nodes of casts an earlier forward made: shared and deferred
// together, by when each cast was first made, so that the backward (which
// walks a list from its end) runs the last-made first.
func TestByCastOrder(t *testing.T) {
	a, b, c, d := &tensor{name: "a"}, &tensor{name: "b"}, &tensor{name: "c"}, &tensor{name: "d"}
	p := &pipeline{castOrder: map[*tensor]int{a: 0, b: 1, c: 2, d: 3}}
	toCopy := func(x *tensor) *node { return &node{name: "ToCopy", ins: []*tensor{x}} }
	shared := []*node{toCopy(d), toCopy(a)}   // the head's cast (d) among them
	deferred := []*node{toCopy(c), toCopy(b)} // a recompute's, latest block first
	got := p.byCastOrder(shared, deferred)
	var names []string
	for _, n := range got {
		names = append(names, n.ins[0].name)
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v (backward runs it from the end: d, the head's, first)", names, want)
	}
}

// TestPipelineExpertKinds checks that a pipeline under skewed expert
// parallelism simulates every kind of expert-parallel rank of each stage
// and reports them for the busiest stage (stages.go, busiestExpertRank).
func TestPipelineExpertKinds(t *testing.T) {
	spec, err := model.Load(filepath.Join("..", "bench", "torch", "dist", "moe-llama.yaml"),
		model.Overrides{PP: 2, GradAccum: 2, DP: 2, EP: 2, EPSkew: "2", Seq: 512})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Estimate(spec)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pipeline == nil || r.Experts == nil || len(r.Experts.Kinds) != 3 {
		t.Fatalf("pipeline %v, experts %+v: want a pipeline's busiest stage with its three kinds of rank", r.Pipeline, r.Experts)
	}
	for _, k := range r.Experts.Kinds {
		if k.DeviceTotal > r.DeviceTotal {
			t.Errorf("%s rank %d B above the stage's reported %d B", k.Kind, k.DeviceTotal, r.DeviceTotal)
		}
	}
}

// TestPipelineNote: every estimate of pipeline stages says that the
// driver's placement of segments, which memplan models only in part, has
// made such runs reserve up to PipelineUnder more (docs/parallelism.md §3.2.11);
// one without a pipeline does not.
func TestPipelineNote(t *testing.T) {
	for _, tc := range []struct {
		pp, dp int64
		zero   string
		want   bool
	}{
		{1, 1, "", false},
		{2, 1, "", true},
		{2, 2, "0", true},
		{2, 2, "1", true},
		{2, 2, "2", true},
	} {
		o := model.Overrides{PP: tc.pp, GradAccum: 2, Seq: 512, Batch: 1, DP: tc.dp, Zero: tc.zero}
		if tc.pp > 1 {
			o.PPSchedule = "1f1b"
		}
		r, err := Estimate(load(t, "tinyllama-1.1b.yaml", o))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(r.Notes, PipelineNote); got != tc.want {
			t.Errorf("pp %d dp %d zero %q: the placement note %v, want %v", tc.pp, tc.dp, tc.zero, got, tc.want)
		}
	}
}

// TestPipelineBackwardAutocast: a schedule's step() runs the micro-batches'
// backward inside the step's autocast region, so repeat_kv's
// ExpandBackward0 sums the half gradient into fp32 (sum is on autocast's
// fp32 list) and validate_outputs casts it back: an fp32 gradient the
// size of the keys' before each bf16 one (measured: C++ stacks of Llama 4's
// pipeline stages, bench/results/2026-11-28-h200x2-pp-stacks). Outside a
// pipeline, and in pure bf16, backward runs outside autocast.
func TestPipelineBackwardAutocast(t *testing.T) {
	const seq = 2048
	key := int64(seq * 4 * 128 * f32) // the chunked layers repeat 4 key heads of 128
	for _, tc := range []struct {
		o    model.Overrides
		want bool
	}{
		{model.Overrides{Batch: 1, Seq: seq, Precision: model.AMPBF16, PP: 2, PPSchedule: model.PPGPipe, GradAccum: 2}, true},
		{model.Overrides{Batch: 1, Seq: seq, Precision: model.BF16, PP: 2, PPSchedule: model.PPGPipe, GradAccum: 2}, false},
		{model.Overrides{Batch: 1, Seq: seq, Precision: model.AMPBF16}, false},
	} {
		n := 0
		traced(t, loadHF(t, "llama4-test-4layer.json", tc.o), func(s *sim, x *tensor, alloc bool) {
			if !alloc && s.phase.Stage == StageBackward && strings.HasPrefix(x.label(), "uncast grad of ") && x.bytes() == key {
				n++
			}
		})
		if (n > 0) != tc.want {
			t.Errorf("%s pp %d: %d fp32 sums of repeat_kv's gradient, want some: %v", tc.o.Precision, tc.o.PP, n, tc.want)
		}
	}
}

// TestPipelineCachedCastOrder: inside a pipeline step's autocast region a
// recomputed segment finds its weights' casts cached, and the ToCopy node
// of one its own micro-batch's forward made goes where that forward made
// the cast: before the input's cast (autocast casts an op's arguments
// right to left, matmulView), so in backward the input cast's gradient is
// made before the weight's fp32 gradient (castPlace; measured: held-out
// set 61's Maverick 1F1B stage, bench/results/2026-11-28-h200x4-heldout-61/
// histories). In the last stage's backward, each time the shared expert's
// up projection makes its weight's half gradient and its input's: where
// the weight's fp32 gradient follows at once, the input cast's fp32
// gradient ("mul", the norm's output) comes first.
func TestPipelineCachedCastOrder(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/llama4-test-maverick-4layer.json", model.Overrides{
		Batch: 1, Seq: 2048, Precision: model.AMPBF16, Optimizer: model.AdamW, PP: 2, PPSchedule: "1f1b",
		GradAccum: 4, Steps: 2, Checkpointing: model.CkptBlock})
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		label string
		bytes int64
	}
	var seen []ev
	_, err = estimateWith(spec, func(*sim) {}, func(sm *sim) {
		if sm.pp == nil || !sm.pp.last() {
			return
		}
		sm.trace = func(x *tensor, alloc bool) {
			if alloc && sm.phase.Stage == StageBackward && len(seen) < 1<<20 {
				seen = append(seen, ev{x.label(), x.bytes()})
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// After the product's two half gradients (the weight's, "shared.up",
	// then the input's, "mul"): the input cast's fp32 gradient and the
	// weight cast's, in the next few allocations when the weight's cast
	// node is not left to the end of the backward.
	checked := 0
	for i := 0; i+2 < len(seen); i++ {
		h, in := seen[i], seen[i+1]
		if h.label != "shared.up" || in.label != "mul" || in.bytes <= h.bytes {
			continue
		}
		input, weight := -1, -1
		for j := i + 2; j < min(i+8, len(seen)); j++ {
			e := seen[j]
			if input < 0 && e.label == "mul" && e.bytes == 2*in.bytes {
				input = j
			}
			if weight < 0 && e.label == "shared.up" && e.bytes == 2*h.bytes {
				weight = j
			}
		}
		if weight < 0 {
			continue // the cast's node runs at the end of the backward
		}
		checked++
		if input < 0 || input > weight {
			t.Errorf("allocation %d: the weight's fp32 gradient before the input cast's gradient (%d)", weight, input)
		}
	}
	if checked == 0 {
		t.Fatal("no up projection's weight cast ran beside its product")
	}
	t.Logf("%d up projections' casts in order", checked)
}

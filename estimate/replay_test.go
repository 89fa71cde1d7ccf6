package estimate

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/memplan/memplan/model"
)

// TestReplayExact compares estimates whose later steps replay a recorded
// step's allocator calls (replay.go) with the same estimates simulating
// every step op by op: the results must be equal in every field, over
// models and settings that exercise each kind of recorded event (FSDP2's
// side streams, DDP's rebuild, checkpointing's recompute, cuDNN's and
// cuBLAS's first kernels, gradient accumulation, gradients zeroed in
// place, a mixture of experts,
// tensor parallelism, LoRA), and at least
// one of them must take more than two steps, replayed.
func TestReplayExact(t *testing.T) {
	cases := []struct {
		file string
		hf   bool
		o    model.Overrides
	}{
		{"vit-b-16.yaml", false, model.Overrides{Batch: 64, Precision: model.BF16, Checkpointing: "every-block"}},
		{"vit-b-16.yaml", false, model.Overrides{Batch: 128, Precision: model.BF16}},
		{"mistral-7b.yaml", false, model.Overrides{}},
		{"mlp.yaml", false, model.Overrides{Batch: 8, Precision: model.AMPBF16}},
		{"resnet-50.yaml", false, model.Overrides{Batch: 32, Precision: model.AMPBF16}},
		{"llama-3.2-1b.yaml", false, model.Overrides{Batch: 1, Seq: 2048, Precision: model.FP32}},
		{"llama-3.2-1b.yaml", false, model.Overrides{Batch: 1, Seq: 2048, Precision: model.AMPBF16, DP: 2, Zero: "0"}},
		{"llama-3.2-1b.yaml", false, model.Overrides{Batch: 1, Seq: 1024, Precision: model.AMPBF16, DP: 2, Zero: "3", Checkpointing: "every-block"}},
		{"bert-base.yaml", false, model.Overrides{Batch: 16, Precision: model.AMPBF16, GradAccum: 2}},
		{"gpt2-124m.yaml", false, model.Overrides{Batch: 8, Precision: model.AMPBF16, GradAccum: 3, ZeroGrad: "zeros"}},
		{"llama-3.2-1b.yaml", false, model.Overrides{Batch: 1, Seq: 2048, Precision: model.AMPBF16, TP: 2, SP: true}},
		{"llama-3.2-1b.yaml", false, model.Overrides{Batch: 2, Seq: 1024, Precision: model.BF16, LoRA: 16}},
		{"llama4-test-4layer.json", true, model.Overrides{Batch: 1, Seq: 4096, Precision: model.AMPBF16, Checkpointing: "every-block"}},
		{"glm-4.5-air.json", true, model.Overrides{}},
	}
	longer := 0
	for _, c := range cases {
		var spec *model.Spec
		if c.hf {
			spec = loadHF(t, c.file, c.o)
		} else {
			spec = load(t, c.file, c.o)
		}
		run := func(skip bool) (string, int) {
			replaySkip = skip
			defer func() { replaySkip = true }()
			r, err := Estimate(spec)
			if err != nil {
				t.Fatal(err)
			}
			steps := 0
			for _, p := range r.Phases {
				steps = max(steps, p.Iteration+1)
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			return string(b), steps
		}
		fast, steps := run(true)
		full, _ := run(false)
		if fast != full {
			t.Errorf("%s %+v: the replayed steps differ from the simulated ones:\n%s\n%s", c.file, c.o, fast, full)
		}
		if steps > 2 {
			longer++
		}
	}
	if longer == 0 {
		t.Errorf("no estimate took more than two steps: nothing was replayed")
	}
}

// TestReplayExactEverySpec repeats TestReplayExact's comparison over every
// bundled spec, as it stands and at a second precision, and over the
// transformers configs of model/testdata/hf at a short sequence: the
// replayed steps must give what simulating them gives, field for field.
func TestReplayExactEverySpec(t *testing.T) {
	if testing.Short() {
		t.Skip("estimates every spec twice")
	}
	var specs []*model.Spec
	files, _ := filepath.Glob("../specs/*.yaml")
	for _, f := range files {
		for _, o := range []model.Overrides{{}, {Precision: model.BF16}} {
			s, err := model.Load(f, o)
			if err != nil {
				t.Fatal(err)
			}
			specs = append(specs, s)
		}
	}
	hf, _ := filepath.Glob("../model/testdata/hf/*.json")
	for _, f := range hf {
		s, err := model.LoadHF(f, model.Overrides{Batch: 1, Seq: 256, Precision: model.AMPBF16})
		if err != nil {
			continue // a config memplan refuses (its own tests say why)
		}
		specs = append(specs, s)
	}
	if len(specs) < 60 {
		t.Fatalf("%d specs, want at least 60", len(specs))
	}
	replayed := 0
	for _, spec := range specs {
		run := func(skip bool) (string, int) {
			replaySkip = skip
			defer func() { replaySkip = true }()
			r, err := Estimate(spec)
			if err != nil {
				t.Fatalf("%s: %v", spec.File, err)
			}
			steps := 0
			for _, p := range r.Phases {
				steps = max(steps, p.Iteration+1)
			}
			b, _ := json.Marshal(r)
			return string(b), steps
		}
		fast, steps := run(true)
		if full, _ := run(false); fast != full {
			t.Errorf("%s %+v: the replayed steps differ from the simulated ones", spec.File, spec.Training)
		}
		if steps > 2 {
			replayed++
		}
	}
	t.Logf("%d specs, %d with steps replayed", len(specs), replayed)
	if replayed < len(specs)/2 {
		t.Errorf("%d of %d estimates replayed a step, want most", replayed, len(specs))
	}
}

// TestStepEventSize keeps a recorded event at 16 bytes: a step records one
// per allocator call, about 18,000 for a 7B step, in fresh memory the
// first estimate of a process pays for by the page (docs/performance.md,
// forty-sixth session).
func TestStepEventSize(t *testing.T) {
	if n := unsafe.Sizeof(stepEvent{}); n != 16 {
		t.Errorf("stepEvent is %d bytes, want 16", n)
	}
}

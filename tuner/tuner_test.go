package tuner

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memplan/memplan/model"
)

func spec(t testing.TB, file string) *model.Spec {
	t.Helper()
	s, err := model.Load(filepath.Join("..", "specs", file), model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// linear is a fake oracle: fixed + perSample·batch bytes.
func linear(fixed, per int64) Oracle {
	return func(s *model.Spec) (int64, error) { return fixed + per*s.Training.Batch, nil }
}

func TestTuneSearch(t *testing.T) {
	s := spec(t, "mlp.yaml")
	s.Device.Memory = 1000
	tests := []struct {
		name  string
		c     Constraints
		o     Oracle
		want  int64
		below bool
	}{
		{"linear", Constraints{}, linear(100, 10), 80, false}, // 100+10·80 = 900 = 90%
		{"multiple of 8", Constraints{MultipleOf: 8}, linear(100, 10), 80, false},
		{"multiple of 7", Constraints{MultipleOf: 7}, linear(100, 10), 77, false},
		{"powers of two", Constraints{PowersOfTwo: true}, linear(100, 10), 64, true},
		{"max", Constraints{Max: 50}, linear(100, 10), 50, true},
		{"min", Constraints{Min: 5}, linear(100, 10), 80, false},
		{"steps", Constraints{}, func(s *model.Spec) (int64, error) { // allocator-like jumps
			b := s.Training.Batch
			return 100 + 10*b + 40*(b/25), nil
		}, 72, false}, // f(72) = 900, f(73) = 910
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Tune(s, DefaultBand, tt.c, tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if r.Batch != tt.want || r.BelowBand != tt.below {
				t.Errorf("Tune = batch %d (below band %v), want %d (%v); trials %+v", r.Batch, r.BelowBand, tt.want, tt.below, r.Trials)
			}
			if r.DeviceTotal > 900 {
				t.Errorf("reported a batch whose prediction %d exceeds the band", r.DeviceTotal)
			}
		})
	}
}

func TestTuneNoFit(t *testing.T) {
	s := spec(t, "llama-3-8b.yaml")
	s.Training.Checkpointing = model.Checkpointing{Mode: model.CkptNone}
	r, err := Tune(s, DefaultBand, Constraints{}, Analytic)
	if !errors.Is(err, ErrNoFit) {
		t.Fatalf("err = %v, want ErrNoFit", err)
	}
	if len(r.Fixes) == 0 || !r.Fixes[0].Fits {
		t.Fatalf("fixes = %+v, want a first fix that fits", r.Fixes)
	}
	for i := 1; i < len(r.Fixes); i++ {
		if r.Fixes[i].Fits && r.Fixes[i].GPUs == r.Fixes[i-1].GPUs && r.Fixes[i].Cost < r.Fixes[i-1].Cost {
			t.Errorf("fixes not in order of cost: %+v", r.Fixes)
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		global, dp, max   int64
		micro, accum, ach int64
		exact             bool
	}{
		{512, 8, 16, 16, 4, 512, true},
		{512, 8, 12, 8, 8, 512, true},
		{100, 1, 30, 25, 4, 100, true},
		{97, 1, 40, 32, 3, 96, false}, // prime: nearest with 3 steps
		{1000, 3, 64, 37, 9, 999, false},
	}
	for _, tt := range tests {
		p, err := Split(tt.global, tt.dp, tt.max)
		if err != nil {
			t.Fatal(err)
		}
		if p.MicroBatch != tt.micro || p.Accum != tt.accum || p.Achieved != tt.ach || p.Exact != tt.exact {
			t.Errorf("Split(%d, %d, %d) = %+v, want micro %d accum %d achieved %d exact %v", tt.global, tt.dp, tt.max, p, tt.micro, tt.accum, tt.ach, tt.exact)
		}
		if p.MicroBatch > tt.max {
			t.Errorf("micro-batch %d above the limit %d", p.MicroBatch, tt.max)
		}
	}
}

// tuneAbove lists the specs whose capped search recommends a batch above
// the largest that trained, with why.
var tuneAbove = map[string]string{
	// ViT-B/16 under set_per_process_memory_fraction(0.9) on an H100:
	// the run trained at 1,063 and ran out of memory at 1,064; memplan's
	// capped simulation (under the tighter limit less the safety margin)
	// runs out at 1,060 and 1,063 and fits at 1,064, where PyTorch's
	// flush-and-retry near the limit turns on which cached blocks are
	// free — placement the simulation does not reproduce there. The
	// search, which takes the curve to be monotone, stopped at 1,057 until
	// the thirty-third session's room in the context's address space
	// (alloc.Allocator.LibraryLoaded) made ViT's small batches' estimates
	// those measured (batch 1: 1,992 MiB reserved against 1,994 measured,
	// 1,972 before; batch 4: 1,932 against 1,932, 1,992 before), and its
	// probes now land on 1,064 (docs/allocator.md §8).
	"specs/vit-b-16.yaml": "the capped simulation fits 1,064 between two simulated OOMs",
}

// TestTuneAgainstMeasured compares the tuner, run as memplan tune --cap
// runs it (the measurement's cap, the default safety margin), with the largest batches that really trained on the
// H100 under set_per_process_memory_fraction(0.9)
// (bench/results/*-maxbatch.jsonl): within 5% and never above, but for
// the listed specs (tuneAbove), at most 0.5% above.
func TestTuneAgainstMeasured(t *testing.T) {
	f, err := os.ReadFile("../bench/results/2026-11-22-h100-maxbatch.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytesReader(f))
	n := 0
	for dec.More() {
		var m struct {
			Spec     string  `json:"spec"`
			MaxBatch int64   `json:"max_batch"`
			Fraction float64 `json:"fraction"`
		}
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		n++
		s := spec(t, filepath.Base(m.Spec))
		s.Device, _ = model.LookupDevice("h100-80gb")
		start := time.Now()
		band, c := Band{m.Fraction - 0.05, m.Fraction}, Constraints{Margin: DefaultMargin}
		r, err := Tune(s, band, c, Capped(Limit(band, c)))
		el := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		switch why, listed := tuneAbove[m.Spec]; {
		case listed && r.Batch <= m.MaxBatch:
			t.Errorf("%s: tune = %d, measured %d: listed as above the measurement (%s) but no longer is", m.Spec, r.Batch, m.MaxBatch, why)
		case listed && float64(r.Batch) > 1.005*float64(m.MaxBatch):
			t.Errorf("%s: tune = %d, measured largest batch %d: more than 0.5%% above", m.Spec, r.Batch, m.MaxBatch)
		case !listed && r.Batch > m.MaxBatch || float64(r.Batch) < 0.95*float64(m.MaxBatch):
			t.Errorf("%s: tune = %d, measured largest batch %d", m.Spec, r.Batch, m.MaxBatch)
		}
		t.Logf("%s: tune %d, measured %d, %d trials in %v", m.Spec, r.Batch, m.MaxBatch, len(r.Trials), el)
	}
	if n == 0 {
		t.Fatal("no measurements")
	}
}

func bytesReader(b []byte) *bytesR { return &bytesR{b: b} }

type bytesR struct{ b []byte }

func (r *bytesR) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestParseBand(t *testing.T) {
	for in, want := range map[string]Band{"0.85-0.90": {0.85, 0.90}, "80%-90%": {0.80, 0.90}, "0.9": {0.85, 0.90}} {
		got, err := ParseBand(in)
		if err != nil || abs64(got.Lo-want.Lo) > 1e-9 || abs64(got.Hi-want.Hi) > 1e-9 {
			t.Errorf("ParseBand(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"1.5", "0.9-0.8", "x", "85-90", "0-0.5"} {
		if _, err := ParseBand(in); err == nil {
			t.Errorf("ParseBand(%q) accepted", in)
		}
	}
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// BenchmarkTune times a whole analytic search (go test -bench Tune ./tuner);
// docs/tuner.md records the figures.
func BenchmarkTune(b *testing.B) {
	for _, file := range []string{"gpt2-124m.yaml", "llama-3.2-1b.yaml", "bert-base.yaml", "vit-b-16.yaml", "resnet-50.yaml"} {
		for _, capped := range []bool{false, true} {
			// As memplan tune runs it: the default margin, and under --cap
			// a cap that much tighter.
			name := file
			o := Analytic
			if capped {
				name, o = file+"/cap", Capped(Limit(DefaultBand, Constraints{Margin: DefaultMargin}))
			}
			b.Run(name, func(b *testing.B) {
				s := spec(b, file)
				s.Device, _ = model.LookupDevice("h100-80gb")
				for i := 0; i < b.N; i++ {
					if _, err := Tune(s, DefaultBand, Constraints{Margin: DefaultMargin}, o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

package probe

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

func spec(t *testing.T, file string) *model.Spec {
	t.Helper()
	s, err := model.Load(filepath.Join("testdata", file), model.Overrides{Dev: "h100-80gb"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func h100() *Fake {
	return &Fake{Name: "Fake H100", Total: 85_017_493_504, ContextBytes: 527 << 20, Granularity: 2 << 20}
}

var band = Options{Lo: 0.85, Hi: 0.90}

func TestProbeFindsBand(t *testing.T) {
	// residual-mlp fits millions of samples: the search must get there
	// within its step budget, not stop below the band.
	for _, file := range []string{"gpt2-124m.yaml", "residual-mlp.yaml", "vit-b-16.yaml", "bert-base.yaml"} {
		t.Run(file, func(t *testing.T) {
			f := h100()
			s := spec(t, file)
			r, err := Run(context.Background(), f, s, band)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := tuner.Tune(s, tuner.Band{Lo: 0.85, Hi: 0.90}, tuner.Constraints{}, tuner.Analytic)
			// The probe stops within 0.1% of the largest batch.
			if float64(r.Batch) < 0.999*float64(want.Batch)-1 || r.Batch > want.Batch+1 || !r.InBand {
				t.Errorf("probe batch %d (in band %v), analytic tuner %d; %d steps", r.Batch, r.InBand, want.Batch, len(r.Steps))
			}
			if len(r.Steps) > 40 {
				t.Errorf("%d steps", len(r.Steps))
			}
			for _, st := range r.Steps {
				if st.Allocated && st.Fill > 0.90 {
					t.Errorf("step %+v allocated past the band", st)
				}
			}
			if f.Live() != 0 || f.ContextOpen() {
				t.Errorf("left %d allocations, context open %v", f.Live(), f.ContextOpen())
			}
			if r.Granularity != 2<<20 || r.PerSample <= 0 || r.FixedBytes <= 0 {
				t.Errorf("granularity %d, fit %d + %d·b", r.Granularity, r.FixedBytes, r.PerSample)
			}
			t.Logf("batch %d in %d steps", r.Batch, len(r.Steps))
		})
	}
}

func TestProbeOthersAndNoFit(t *testing.T) {
	f := h100()
	f.OthersBytes = 40 << 30
	s := spec(t, "gpt2-124m.yaml")
	r, err := Run(context.Background(), f, s, band)
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := Run(context.Background(), h100(), s, band)
	if r.Batch >= alone.Batch || r.OthersBytes < 39<<30 {
		t.Errorf("with 40 GiB held elsewhere: batch %d (alone %d), others %d", r.Batch, alone.Batch, r.OthersBytes)
	}

	big := h100()
	_, err = Run(context.Background(), big, spec(t, "llama-3-8b.yaml"), band)
	if !errors.Is(err, ErrNoFit) {
		t.Fatalf("llama-3-8b: err = %v, want ErrNoFit", err)
	}
	if big.allocs != 0 {
		t.Errorf("made %d allocations for a plan that cannot fit", big.allocs)
	}
}

func TestProbeDriverErrors(t *testing.T) {
	s := spec(t, "mlp.yaml")
	var de *DriverError
	if _, err := Run(context.Background(), &Fake{NoDevice: true}, s, band); !errors.As(err, &de) {
		t.Errorf("no device: err = %v, want *DriverError", err)
	}
	if _, err := Run(context.Background(), h100(), s, Options{DeviceIndex: 3, Lo: 0.85, Hi: 0.9}); err == nil {
		t.Error("device index 3 accepted")
	}
	f := h100()
	gs := spec(t, "gpt2-124m.yaml")
	p1, err := planFor(gs, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The driver runs out after batch 1 and the granularity probe: later
	// steps fail, and their memory is freed.
	f.FailAfter = 2*len(p1.segs) + 2
	r, err := Run(context.Background(), f, gs, band)
	if err != nil {
		t.Fatal(err)
	}
	if f.Live() != 0 || r.Batch < 1 {
		t.Errorf("after driver OOM: %d live, batch %d", f.Live(), r.Batch)
	}
}

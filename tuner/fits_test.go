package tuner

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// TestTuneAgreesWithFits: at tune's answer the one rule says it fits, and
// at the next batch it does not, under the same band and margin.
func TestTuneAgreesWithFits(t *testing.T) {
	cases := []struct{ spec, dev string }{
		{"gpt2-124m.yaml", "a100-40gb"},
		{"gpt2-124m.yaml", "h100-80gb"},
		{"bert-base.yaml", "l4"},
		{"llama-3.2-1b.yaml", "a100-80gb"},
	}
	for _, band := range []Band{DefaultBand, {0.7, 0.8}} {
		for _, margin := range []float64{0, DefaultMargin} {
			for _, tc := range cases {
				t.Run(tc.spec+"/"+tc.dev, func(t *testing.T) {
					s := spec(t, tc.spec)
					d, ok := model.LookupDevice(tc.dev)
					if !ok {
						t.Fatalf("no device %s", tc.dev)
					}
					s.Device = d
					r, err := Tune(s, band, Constraints{Margin: margin}, Analytic)
					if err != nil {
						t.Fatal(err)
					}
					for _, b := range []int64{r.Batch, r.Batch + 1} {
						x := *s
						x.Training.Batch = b
						v, err := Analytic(&x)
						if err != nil {
							t.Fatal(err)
						}
						got, want := Fits(v, d.Memory, band, margin) == FitsTarget, b == r.Batch
						if got != want {
							t.Errorf("band %v margin %g: Fits at batch %d = %v, want %v (tune said %d)", band, margin, b, got, want, r.Batch)
						}
					}
				})
			}
		}
	}
}

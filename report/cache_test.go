package report

import (
	"path/filepath"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// TestSharesWith: an estimate the cache shares with another device of the
// same cuBLAS workspace (estimate.Result.SharesWith) equals that device's
// own; convolutions (cuDNN) are never shared, and transformers, whose
// reduction scratch the SM count sizes only on some devices, are shared
// between most.
func TestSharesWith(t *testing.T) {
	for _, c := range []struct {
		file  string
		share bool // some pair of distinct devices shares
	}{
		{"llama-3.2-1b.yaml", true},
		{"tinyllama-1.1b.yaml", true},
		{"gpt2-124m.yaml", true},
		{"resnet-50.yaml", false},
	} {
		t.Run(c.file, func(t *testing.T) {
			type est struct {
				d model.Device
				r *estimate.Result
			}
			var all []est
			for _, d := range model.DeviceNames() {
				s, err := model.Load(filepath.Join("..", "specs", c.file), model.Overrides{Dev: d, Batch: 2})
				if err != nil {
					t.Fatal(err)
				}
				r, err := estimate.Estimate(s)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, est{s.Device, r})
			}
			shared := 0
			for _, a := range all {
				for _, b := range all {
					if a.d.Name == b.d.Name || a.d.Hopper() != b.d.Hopper() || !a.r.SharesWith(b.d) {
						continue
					}
					shared++
					if a.r.DeviceTotal != b.r.DeviceTotal || a.r.PeakReserved != b.r.PeakReserved {
						t.Errorf("%s shares with %s, but its device total is %d and %s's %d",
							a.d.Name, b.d.Name, a.r.DeviceTotal, b.d.Name, b.r.DeviceTotal)
					}
				}
			}
			if (shared > 0) != c.share {
				t.Errorf("%d ordered pairs of devices share; want some: %v", shared, c.share)
			}
		})
	}
}

package report

import (
	"path/filepath"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// TestDeviceSized: the estimates the cache shares across device classes
// (DeviceSized unset) are the same on every catalog device with the same
// cuBLAS workspace, and convolutions (cuDNN) and biases (the reduction
// scratch) set DeviceSized.
func TestDeviceSized(t *testing.T) {
	for _, c := range []struct {
		file  string
		sized bool
	}{
		{"llama-3.2-1b.yaml", false},
		{"tinyllama-1.1b.yaml", false},
		{"resnet-50.yaml", true},
		{"gpt2-124m.yaml", true},
	} {
		t.Run(c.file, func(t *testing.T) {
			totals := map[bool]int64{}
			for _, d := range model.DeviceNames() {
				s, err := model.Load(filepath.Join("..", "specs", c.file), model.Overrides{Dev: d, Batch: 2})
				if err != nil {
					t.Fatal(err)
				}
				r, err := estimate.Estimate(s)
				if err != nil {
					t.Fatal(err)
				}
				if r.DeviceSized != c.sized {
					t.Fatalf("%s: DeviceSized = %v, want %v", d, r.DeviceSized, c.sized)
				}
				h := s.Device.Hopper()
				if v, ok := totals[h]; !c.sized && ok && v != r.DeviceTotal {
					t.Errorf("%s: device total %d, another device of the same cuBLAS workspace %d", d, r.DeviceTotal, v)
				}
				totals[h] = r.DeviceTotal
			}
		})
	}
}

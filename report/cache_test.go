package report

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
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

// TestRowsShareModel: a row whose spec is another row's model and training
// (specs/mistral-7b.yaml is bf16 already) makes no estimate of its own and
// has that row's cells; a model that differs in one field shares nothing.
func TestRowsShareModel(t *testing.T) {
	const mistral = "../specs/mistral-7b.yaml"
	load := func(p, dev string) (*model.Spec, error) {
		if p != "fewer-layers" {
			return benchLoad(p, dev)
		}
		s, err := benchLoad(mistral, dev)
		if err == nil {
			s.Model.NumLayers--
		}
		return s, err
	}
	devs := model.DeviceNames()
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin}
	shared := newSharedCache()
	paths := []string{mistral, mistral + "?precision=bf16", "fewer-layers"}
	rows := make([]Row, len(paths))
	made := make([]int64, len(paths))
	for i, p := range paths {
		memo := newRowCache()
		memo.shared = shared
		before := estimatesMade.Load()
		rows[i] = row(p, devs, load, memo, o, func() {})
		made[i] = estimatesMade.Load() - before
	}
	if made[0] == 0 || made[1] != 0 || made[2] == 0 {
		t.Errorf("estimates made by the rows %v: want some, none, some", made)
	}
	if !reflect.DeepEqual(rows[0].Cells, rows[1].Cells) {
		t.Errorf("the same job's rows differ:\n%+v\n%+v", rows[0].Cells, rows[1].Cells)
	}
	if rows[2].Cells[0].DeviceTotal == rows[0].Cells[0].DeviceTotal {
		t.Errorf("a model with one layer fewer has the same device total %d", rows[0].Cells[0].DeviceTotal)
	}
}

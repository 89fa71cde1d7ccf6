package tuner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestTuneTrials checks that Tune's answer for every bundled spec on an
// H100 fits and the valid batch above it does not; with
// MEMPLAN_TUNE_TRIALS=1 it does so for the imported configs too, on three
// devices, and logs how many estimates each search took
// (docs/performance.md, eighteenth session).
func TestTuneTrials(t *testing.T) {
	full := os.Getenv("MEMPLAN_TUNE_TRIALS") != ""
	if testing.Short() && !full {
		t.Skip("a batch search per spec")
	}
	var specs []*model.Spec
	yamls, _ := filepath.Glob("../specs/*.yaml")
	for _, f := range yamls {
		s, err := model.Load(f, model.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	devices := []string{"h100-80gb"}
	var hfs []string
	if full {
		devices = []string{"a100-40gb", "h100-80gb", "h200-141gb"}
		hfs, _ = filepath.Glob("../model/testdata/hf/*.json")
	}
	for _, f := range hfs {
		s, err := model.LoadHF(f, model.Overrides{Seq: 2048})
		if err != nil {
			s, err = model.LoadHF(f, model.Overrides{Seq: 512}) // BERT's positions
		}
		if err != nil {
			t.Fatal(err)
		}
		s.Name = strings.TrimSuffix(filepath.Base(f), ".json")
		specs = append(specs, s)
	}
	total, cases := 0, 0
	for _, dev := range devices {
		d, _ := model.LookupDevice(dev)
		for _, s0 := range specs {
			s := *s0
			s.Device = d
			c := Constraints{Margin: DefaultMargin}
			r, err := Tune(&s, DefaultBand, c, Analytic)
			if err != nil {
				continue // batch 1 does not fit: the fixes' search, not this one
			}
			u := s
			u.Training.Batch = nextValid(c, r.Batch)
			v, err := Analytic(&u)
			if err != nil {
				t.Fatal(err)
			}
			if v <= limitBytes(DefaultBand, c.Margin, d.Memory) {
				t.Errorf("%s on %s: batch %d fits (%d), Tune said %d", s.Name, dev, u.Training.Batch, v, r.Batch)
			}
			var bs []int64
			for _, x := range r.Trials {
				bs = append(bs, x.Batch)
			}
			if full {
				t.Logf("%-24s %-11s batch %4d  %2d trials %v", s.Name, dev, r.Batch, len(r.Trials), bs)
			}
			total += len(r.Trials)
			cases++
		}
	}
	t.Logf("%d searches, %d trials", cases, total)
	if cases < 10 {
		t.Errorf("only %d searches: want every bundled spec whose batch 1 fits", cases)
	}
}

package report

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// benchLoad reads "PATH[?seq=N][&precision=P]": a bundled spec (.yaml) or a
// transformers config (.json) with overrides, so one path names one job.
func benchLoad(p, dev string) (*model.Spec, error) {
	path, q, _ := strings.Cut(p, "?")
	o := model.Overrides{Dev: dev}
	for _, kv := range strings.Split(q, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "seq":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, err
			}
			o.Seq = n
		case "precision":
			o.Precision = v
		}
	}
	if strings.HasSuffix(path, ".json") {
		if o.Seq == 0 {
			o.Seq = 2048
		}
		return model.LoadHF(path, o)
	}
	return model.Load(path, o)
}

// fiftyJobs is the benchmark's fleet: the bundled specs as written and in
// bf16, and the bundled dense transformers configs at two sequence
// lengths.
func fiftyJobs(t testing.TB) []string {
	specs, _ := filepath.Glob("../specs/*.yaml")
	hf, _ := filepath.Glob("../model/testdata/hf/*.json")
	var jobs []string
	for _, s := range specs {
		jobs = append(jobs, s, s+"?precision=bf16")
	}
	for _, h := range hf {
		if strings.Contains(h, "moe") || strings.Contains(h, "mixtral") || strings.Contains(h, "a3b") {
			continue // MoE simulation is seconds per estimate today (docs/performance.md)
		}
		jobs = append(jobs, h+"?seq=1024", h+"?seq=4096")
	}
	if len(jobs) < 50 {
		t.Fatalf("only %d jobs", len(jobs))
	}
	return jobs[:50]
}

// TestSharedEstimatesMatch: the report's shared estimates give the answers
// tune gives with the estimator called directly.
func TestSharedEstimatesMatch(t *testing.T) {
	paths := []string{"../specs/gpt2-124m.yaml", "../specs/llama-3-8b.yaml", "../specs/resnet-50.yaml"}
	devs := []string{"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l4", "mi300x"}
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin}
	r, err := Build(paths, devs, benchLoad, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		for j, d := range devs {
			t.Run(filepath.Base(p)+"/"+d, func(t *testing.T) {
				s, err := benchLoad(p, d)
				if err != nil {
					t.Fatal(err)
				}
				want, err := tuner.Tune(s, o.Band, tuner.Constraints{Margin: o.Margin}, tuner.Analytic)
				if err != nil && !errors.Is(err, tuner.ErrNoFit) {
					t.Fatal(err)
				}
				c := r.Rows[i].Cells[j]
				if c.MaxBatch != want.Batch {
					t.Errorf("max batch = %d, want %d", c.MaxBatch, want.Batch)
				}
				if want.Batch == 0 && len(want.Fixes) > 0 && want.Fixes[0].Fits && (c.Fix == nil || *c.Fix != want.Fixes[0]) {
					t.Errorf("fix = %+v, want %+v", c.Fix, want.Fixes[0])
				}
			})
		}
	}
}

// BenchmarkReport50x12 builds the report for 50 jobs on the 12 catalog
// devices (docs/performance.md).
func BenchmarkReport50x12(b *testing.B) {
	jobs, devs := fiftyJobs(b), model.DeviceNames()
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin}
	for b.Loop() {
		// Some configs are rejected at seq 4096 (longer than their
		// positions): those cells fail, as in a real fleet report.
		if _, err := Build(jobs, devs, benchLoad, o); err != nil && !errors.Is(err, ErrSomeFailed) {
			b.Fatal(err)
		}
	}
}

package planner

import (
	"errors"
	"testing"

	"github.com/memplan/memplan/model"
)

// BenchmarkSearchRate measures how fast the search goes with the real
// estimator (Simulator): layouts enumerated per second of a plan (every
// one validated, ranked, and judged or left unvisited below the last one
// returned), estimates per second, and per plan the estimates, the layouts
// ruled out without an estimate (by the lower bound or the dominance
// rules) and those left unvisited
// (docs/performance.md, "Searches"). Run it at GOMAXPROCS=1 for the
// per-core figure.
func BenchmarkSearchRate(b *testing.B) {
	for _, bc := range []struct {
		name, file string
		prec       string
		req        Request
	}{
		{"llama-3.2-1b-8gpus", "llama-3.2-1b.yaml", "", Request{GlobalBatch: 64, GPUs: 8}},
		{"llama-3-8b-64gpus", "llama-3-8b.yaml", "", Request{GlobalBatch: 512, MaxGPUs: 64}},
		{"llama-3-70b-bf16-1024gpus", "llama-3-70b.yaml", model.BF16, Request{GlobalBatch: 1024, MaxGPUs: 1024}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			spec, err := model.Load("../specs/"+bc.file, model.Overrides{})
			if err != nil {
				b.Fatal(err)
			}
			if bc.prec != "" {
				spec.Training.Precision = bc.prec
			}
			var st Stats
			for b.Loop() {
				r, err := Plan(spec, bc.req, Simulator{})
				if err != nil && !errors.Is(err, ErrNoLayout) {
					b.Fatal(err)
				}
				st = r.Stats
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(st.Layouts)/sec, "layouts/s")
			b.ReportMetric(float64(st.OracleCalls)/sec, "estimates/s")
			b.ReportMetric(float64(st.OracleCalls), "estimates/op")
			b.ReportMetric(float64(st.Pruned), "pruned/op")
			b.ReportMetric(float64(st.Unvisited), "unvisited/op")
			b.ReportMetric(float64(st.Layouts), "layouts/op")
		})
	}
}

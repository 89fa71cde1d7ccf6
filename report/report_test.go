package report

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
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

// fiftyJobs is the benchmark's fleet, fixed so that its figure and the
// golden report compare across sessions: the bundled specs of the third
// session as written and in bf16, and eight dense transformers configs at
// two sequence lengths (specs and configs added later stay out).
func fiftyJobs(t testing.TB) []string {
	var jobs []string
	for _, s := range []string{"bert-base", "cnn-groupnorm", "gpt2-124m", "gpt2-xl", "llama-3-70b", "llama-3-8b-zero3",
		"llama-3-8b", "llama-3.2-1b", "mistral-7b", "mlp", "qwen2.5-7b", "residual-mlp", "resnet-101", "resnet-50",
		"tinyllama-1.1b", "vit-b-16", "whisper-base-encoder"} {
		p := "../specs/" + s + ".yaml"
		jobs = append(jobs, p, p+"?precision=bf16")
	}
	for _, h := range []string{"bert-base-uncased", "falcon-7b", "gemma-2-2b", "gemma-2b", "gpt2", "llama-3-8b",
		"mistral-7b-v0.1", "phi-3-mini-4k"} {
		p := "../model/testdata/hf/" + h + ".json"
		jobs = append(jobs, p+"?seq=1024", p+"?seq=4096")
	}
	if len(jobs) != 50 {
		t.Fatalf("%d jobs, want 50", len(jobs))
	}
	return jobs
}

// unsharedCell is a cell computed the way it was before cells shared
// anything: its own estimate at the spec's batch, and tune with the
// estimator called directly, starting from the spec's batch (its own, not
// learned from another cell), with no bound.
func unsharedCell(t *testing.T, path, dev string, o Options) Cell {
	s, err := benchLoad(path, dev)
	if err != nil {
		return Cell{Device: dev, Error: err.Error()}
	}
	c := Cell{Device: s.Device.Name, Memory: s.Device.Memory, Batch: s.Training.Batch}
	est, err := estimate.Estimate(s)
	if err != nil {
		c.Error = fmt.Errorf("estimate: %w", err).Error()
		return c
	}
	c.DeviceTotal, c.Fill, c.Breakdown = est.DeviceTotal, est.Fill, breakdown(est)
	c.Verdict = tuner.Fits(est.DeviceTotal, s.Device.Memory, o.Band, o.Margin).String()
	r, err := tuner.Tune(s, o.Band, tuner.Constraints{Margin: o.Margin, FirstFix: true, Hint: s.Training.Batch}, tuner.Analytic)
	switch {
	case err == nil:
		c.MaxBatch, c.GPUs, c.Layout = r.Batch, int64(max(s.Training.DP, 1)), layout(s.Training)
	case errors.Is(err, tuner.ErrNoFit):
		if len(r.Fixes) > 0 && r.Fixes[0].Fits {
			f := r.Fixes[0]
			c.Fix, c.GPUs, c.Layout = &f, f.GPUs, f.Change
		} else {
			c.Layout = fmt.Sprintf("nothing tried fits (up to %d GPUs, offload)", maxGPUs)
		}
	default:
		c.Error = fmt.Errorf("tune: %w", err).Error()
	}
	return c
}

// TestSharedMatchesUnshared: every cell of the report, whose cells share
// estimates, curves and bounds (cache.go), equals the cell computed alone,
// for the fifty jobs of the benchmark (every bundled spec, as written and
// in bf16, and the dense imported configs) on every catalog device; and
// the bounds the report prunes fixes with held on every estimate it made.
func TestSharedMatchesUnshared(t *testing.T) {
	paths, devs := fiftyJobs(t), model.DeviceNames()
	if testing.Short() {
		paths = []string{"../specs/gpt2-124m.yaml", "../specs/llama-3-70b.yaml", "../specs/resnet-50.yaml"}
	}
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin}
	var mu sync.Mutex
	var violations []string
	r, err := build(paths, devs, benchLoad, o, func(c *rowCache) {
		mu.Lock()
		violations = append(violations, c.violations...)
		mu.Unlock()
	})
	if err != nil && !errors.Is(err, ErrSomeFailed) {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("bound: %s", v)
	}
	for i, p := range paths {
		for j, d := range devs {
			t.Run(filepath.Base(p)+"/"+d, func(t *testing.T) {
				t.Parallel()
				want := unsharedCell(t, p, d, o)
				if got := r.Rows[i].Cells[j]; !reflect.DeepEqual(got, want) {
					t.Errorf("shared\n%+v\nunshared\n%+v", got, want)
				}
			})
		}
	}
}

// BenchmarkReport50x12 builds the report for 50 jobs on the 12 catalog
// devices (docs/performance.md), and reports its CPU time (cpu-s/op).
func BenchmarkReport50x12(b *testing.B) {
	jobs, devs := fiftyJobs(b), model.DeviceNames()
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin}
	cpu, n, made := cpuTime(), 0, estimatesMade.Load()
	for b.Loop() {
		n++
		// Some configs are rejected at seq 4096 (longer than their
		// positions): those cells fail, as in a real fleet report.
		if _, err := Build(jobs, devs, benchLoad, o); err != nil && !errors.Is(err, ErrSomeFailed) {
			b.Fatal(err)
		}
	}
	// CPU time counts this process's work only, not its waits for a core
	// on a shared machine (docs/performance.md).
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n)/1e9, "cpu-s/op")
	b.ReportMetric(float64(estimatesMade.Load()-made)/float64(n), "estimates/op")
}

// TestTextErrorRow: a row whose spec failed with several messages lists
// each on its own line, all indented under the row.
func TestTextErrorRow(t *testing.T) {
	r := &Report{Rows: []Row{{Path: "bad.yaml", Spec: "bad.yaml", Error: "bad.yaml:7: a\nbad.yaml:8: b"}}}
	var b strings.Builder
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	want := "  error: bad.yaml:7: a\n         bad.yaml:8: b\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("Text() =\n%s\nwant it to contain\n%s", b.String(), want)
	}
}

func TestWrapWords(t *testing.T) {
	for _, c := range []struct {
		text  string
		width int
		want  []string
	}{
		{"a b c", 10, []string{"> a b c"}},
		{"aaa bbb ccc", 8, []string{"> aaa", "  bbb", "  ccc"}},
		{"aaa bbb ccc", 9, []string{"> aaa bbb", "  ccc"}},
		{"averyveryverylongword x", 6, []string{"> averyveryverylongword", "  x"}},
	} {
		got := wrapWords(c.text, "> ", "  ", c.width)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("wrapWords(%q, %d) = %q, want %q", c.text, c.width, got, c.want)
		}
	}
}

// TestPlannedCells: with a global batch the report plans a job that
// nothing tried fits (Llama-3-8B on an A100-40GB: ZeRO 3 and offload up to
// 64 GPUs miss) with memplan plan's search and shows its first layout,
// the same one planner.Plan gives, without the hint to run the planner;
// without one it gives the hint as before.
func TestPlannedCells(t *testing.T) {
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin}
	paths := []string{"../specs/llama-3-8b.yaml"}
	plain, err := Build(paths, []string{"a100-40gb"}, benchLoad, o)
	if err != nil {
		t.Fatal(err)
	}
	if c := plain.Rows[0].Cells[0]; c.GPUs != 0 || c.Planned {
		t.Fatalf("without a global batch: %+v, want nothing fitting and no plan", c)
	}
	if _, cmd := planHint(plain.Rows[0], ""); cmd == "" {
		t.Errorf("without a global batch: no memplan plan hint")
	}
	// The hint is a command to paste: a path a shell would split is quoted.
	spaced := plain.Rows[0]
	spaced.Path = "my specs/llama 3.yaml"
	if _, cmd := planHint(spaced, "--precision bf16"); cmd != "memplan plan 'my specs/llama 3.yaml' --device a100-40gb --global-batch N --precision bf16" {
		t.Errorf("hint for a path with spaces: %q", cmd)
	}
	// A transformers config's row hints plan with --hf.
	config := plain.Rows[0]
	config.Path, config.HF = "llama-3-8b.json", true
	if _, cmd := planHint(config, "--seq 8192"); cmd != "memplan plan --hf llama-3-8b.json --device a100-40gb --global-batch N --seq 8192" {
		t.Errorf("hint for a transformers config: %q", cmd)
	}
	o.GlobalBatch = 256
	r, err := Build(paths, []string{"a100-40gb"}, benchLoad, o)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Rows[0].Cells[0]
	spec, err := benchLoad(paths[0], "a100-40gb")
	if err != nil {
		t.Fatal(err)
	}
	want, err := planner.Plan(spec, planner.Request{GlobalBatch: 256, MaxGPUs: 1024, Top: 1, Band: o.Band, Margin: o.Margin}, planner.Simulator{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Planned || c.GPUs != want.Layouts[0].GPUs || c.Layout != want.Layouts[0].Name+" (memplan plan)" {
		t.Errorf("planned cell %+v, want %d GPUs, %s", c, want.Layouts[0].GPUs, want.Layouts[0].Name)
	}
	if _, cmd := planHint(r.Rows[0], ""); cmd != "" {
		t.Errorf("planned row still hints %q", cmd)
	}
	var b strings.Builder
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "a100-40gb: "+want.Layouts[0].Name) {
		t.Errorf("text report does not name the planned layout:\n%s", b.String())
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"github.com/memplan/memplan/report"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/probe"
)

func memplan(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(append([]string{"memplan"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// TestEstimateJSON checks that the JSON form decodes into the documented
// schema (the golden scripts pin its bytes).
func TestEstimateJSON(t *testing.T) {
	code, out, errOut := memplan("estimate", "testdata/fixtures/specs/mlp.yaml", "--format", "json", "--batch", "64")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r estimate.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.SchemaVersion != estimate.SchemaVersion || r.Training.Batch != 64 || r.PeakAllocated <= 0 || r.Params != 6_316_042 {
		t.Errorf("json result = %+v", r)
	}
}

// TestOverrides checks that flags replace spec fields.
func TestOverrides(t *testing.T) {
	base := "testdata/fixtures/specs/llama-3.2-1b.yaml"
	_, a, _ := memplan("estimate", base, "--format", "json")
	_, b, _ := memplan("estimate", base, "--format", "json", "--batch", "1", "--seq", "512", "--precision", "bf16",
		"--optimizer", "adamw-fused", "--checkpointing", "every-block", "--attention", "eager", "--device", "a100-40gb")
	var ra, rb estimate.Result
	if err := json.Unmarshal([]byte(a), &ra); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &rb); err != nil {
		t.Fatal(err)
	}
	tr := rb.Training
	if tr.Batch != 1 || tr.Seq != 512 || tr.Precision != "bf16" || tr.Optimizer.Impl != "fused" ||
		tr.Checkpointing.Mode != "every-block" || tr.Attention != "eager" || rb.Device.Name != "a100-40gb" {
		t.Errorf("overrides not applied: %+v on %s", tr, rb.Device.Name)
	}
	if rb.PeakAllocated >= ra.PeakAllocated {
		t.Errorf("smaller setup predicted %d, not below %d", rb.PeakAllocated, ra.PeakAllocated)
	}
}

// TestCheckExitCodes checks memplan check's documented exit codes.
func TestCheckExitCodes(t *testing.T) {
	spec := "testdata/fixtures/specs/gpt2-124m.yaml"
	tests := []struct {
		args    []string
		code    int
		verdict string
	}{
		{[]string{"--batch", "8"}, 0, "fits"},
		{[]string{"--batch", "47", "--target", "0.80-0.85"}, 3, "above-target"},
		{[]string{"--batch", "64"}, 4, "does-not-fit"},
		{[]string{"--batch", "8", "--target", "1.5"}, 2, ""},
	}
	for _, tt := range tests {
		code, out, errOut := memplan(append([]string{"check", spec}, tt.args...)...)
		if code != tt.code || !strings.HasPrefix(out, tt.verdict) {
			t.Errorf("check %v: exit %d, stdout %q, stderr %q; want %d %q", tt.args, code, out, errOut, tt.code, tt.verdict)
		}
	}
	_, out, _ := memplan("check", spec, "--batch", "8", "--format", "json")
	var v Verdict
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Verdict != "fits" || v.DeviceTotal <= 0 {
		t.Errorf("json verdict %+v, err %v", v, err)
	}
}

// TestTuneCLI checks tune's answer, the global-batch split and the no-fit
// exit code with its fixes.
func TestTuneCLI(t *testing.T) {
	code, out, errOut := memplan("tune", "testdata/fixtures/specs/gpt2-124m.yaml", "--global-batch", "512", "--dp", "8", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Batch int64
		Plan  struct {
			MicroBatch int64 `json:"micro_batch"`
			Accum      int64 `json:"grad_accum"`
			Achieved   int64 `json:"achieved_global_batch"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Batch < 40 || r.Plan.Achieved != 512 || r.Plan.MicroBatch*r.Plan.Accum*8 != 512 || r.Plan.MicroBatch > r.Batch {
		t.Errorf("tune = %+v", r)
	}
	code, out, _ = memplan("tune", "testdata/fixtures/specs/llama-3-8b.yaml", "--checkpointing", "none")
	if code != 4 || !strings.Contains(out, "does not fit") || !strings.Contains(out, "fits —") {
		t.Errorf("no-fit tune: exit %d, output %q", code, out)
	}
}

// TestProbeFlags runs tune --probe and check --probe on the fake device,
// and checks that a missing driver exits 1 with a hint.
func TestProbeFlags(t *testing.T) {
	spec := "testdata/fixtures/specs/gpt2-124m.yaml"
	if _, err := probe.Open(); err == nil {
		t.Skip("a CUDA driver is present: the no-driver path cannot be checked here")
	}
	code, _, errOut := memplan("check", spec, "--batch", "8", "--probe")
	if code != 1 || !strings.Contains(errOut, "memplan: hint:") {
		t.Errorf("check --probe without a driver: exit %d, stderr %q", code, errOut)
	}
	fake := &probe.Fake{Name: "Fake H100", Total: 85_017_493_504, ContextBytes: 527 << 20, Granularity: 2 << 20}
	openDriver = func() (probe.Driver, error) { return fake, nil }
	defer func() { openDriver = probe.Open }()
	code, out, errOut := memplan("tune", spec, "--probe", "--format", "json")
	var r struct{ Batch int64 }
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Batch < 40 || r.Batch > 50 {
		t.Errorf("tune --probe: exit %d, batch %d, stderr %q", code, r.Batch, errOut)
	}
	if code, out, _ := memplan("check", spec, "--batch", "8", "--probe"); code != 0 || !strings.HasPrefix(out, "fits") {
		t.Errorf("check --probe: exit %d, %q", code, out)
	}
	if code, _, errOut := memplan("check", spec, "--batch", "8", "--probe", "--device-index", "2"); code != 1 || !strings.Contains(errOut, "--device-index takes 0 to 0") {
		t.Errorf("check --probe --device-index 2: exit %d, %q", code, errOut)
	}
	if fake.Live() != 0 || fake.ContextOpen() {
		t.Errorf("fake device left %d allocations, context open %v", fake.Live(), fake.ContextOpen())
	}
}

// TestHFImport checks import and --hf: the written spec estimates like the
// config it came from, every field the import sets written out (OLMo 2's
// norms and rotary tables, Granite's constants, SmolLM3's NoPE layers,
// StarCoder2's and Phi's blocks and dropouts, Cohere's).
func TestHFImport(t *testing.T) {
	for _, c := range []struct {
		file   string
		params int64
	}{
		{"qwen2.5-0.5b.json", 494_032_768},
		{"olmo2-1b.json", 1_484_916_736},
		{"granite-3.1-2b.json", 2_533_531_648},
		{"smollm3-3b.json", 3_075_098_624},
		{"starcoder2-3b.json", 3_030_371_328},
		{"phi-2.json", 2_779_683_840},
		{"cohere-1b-shape.json", 1_497_401_344},
	} {
		t.Run(c.file, func(t *testing.T) {
			cfg := "testdata/fixtures/hf/" + c.file
			out := filepath.Join(t.TempDir(), "q.yaml")
			if code, _, errOut := memplan("import", cfg, "--seq", "1024", "-o", out); code != 0 {
				t.Fatalf("import: exit %d: %s", code, errOut)
			}
			_, a, _ := memplan("estimate", out, "--batch", "4", "--format", "json")
			_, b, _ := memplan("estimate", "--hf", cfg, "--batch", "4", "--seq", "1024", "--format", "json")
			var ra, rb estimate.Result
			if json.Unmarshal([]byte(a), &ra) != nil || json.Unmarshal([]byte(b), &rb) != nil {
				t.Fatalf("bad json:\n%s\n%s", a, b)
			}
			if ra.Params != c.params || ra.PeakAllocated != rb.PeakAllocated || ra.PeakReserved != rb.PeakReserved {
				t.Errorf("imported spec: %d params, %d / %d B; --hf: %d / %d B", ra.Params, ra.PeakAllocated, ra.PeakReserved, rb.PeakAllocated, rb.PeakReserved)
			}
		})
	}
	if code, out, errOut := memplan("estimate", "--hf", "testdata/fixtures/hf/mixtral-8x7b.json", "--batch", "1", "--seq", "512"); code != 0 || !strings.Contains(out, "46,702,792,704 parameters") {
		t.Errorf("mixtral: exit %d, %q %q", code, out, errOut)
	}
}

// TestReport checks the capacity report across devices.
func TestReport(t *testing.T) {
	code, out, errOut := memplan("report", "testdata/fixtures/specs/llama-3.2-1b.yaml", "testdata/fixtures/specs/llama-3-8b.yaml",
		"--devices", "a100-40gb,h100-80gb", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r report.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Rows) != 2 || len(r.Rows[0].Cells) != 2 {
		t.Fatalf("report %+v, err %v", r, err)
	}
	small, big := r.Rows[0].Cells[1], r.Rows[1].Cells[1] // Llama-3.2-1B and Llama-3-8B on the H100
	if small.Verdict != "fits" || small.MaxBatch < small.Batch || big.MaxBatch != 0 || big.Fix == nil || !big.Fix.Fits || big.GPUs < 1 {
		t.Errorf("report cells: %+v / %+v", small, big)
	}
	if r.Rows[0].Cells[0].MaxBatch >= small.MaxBatch {
		t.Errorf("40 GB A100 allows batch %d, not below the H100's %d", r.Rows[0].Cells[0].MaxBatch, small.MaxBatch)
	}
}

// TestReportPartialFailure: a bad spec is reported in its row, the others
// complete, and the exit code says so.
func TestReportPartialFailure(t *testing.T) {
	code, out, _ := memplan("report", "../../specs/gpt2-124m.yaml", "no-such-spec.yaml", "--devices", "l4,h100-80gb", "--format", "json")
	if code != reportFailed {
		t.Errorf("exit %d, want %d", code, reportFailed)
	}
	var r report.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Rows) != 2 {
		t.Fatalf("report %q: %v", out, err)
	}
	if r.Rows[0].Error != "" || r.Rows[0].Cells[1].MaxBatch == 0 {
		t.Errorf("good row = %+v, want complete", r.Rows[0])
	}
	if r.Rows[1].Error == "" {
		t.Errorf("bad row = %+v, want its error", r.Rows[1])
	}
}

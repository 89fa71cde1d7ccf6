package report

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// goldenReport is the JSON report of the benchmark's 50 jobs on the 12
// catalog devices, first recorded at commit 53d7461, before the report
// shared batch searches and fix estimates between devices
// (docs/performance.md, "Fourth session, second round"), and regenerated
// after each change to the estimator that moved its predictions on purpose
// (MEMPLAN_WRITE_GOLDEN=1, with the report's code unchanged; in the
// thirty-first session once more for the rows' new hf field alone, the
// rest byte for byte the same; in the thirty-third for cuDNN's room in the
// context's address space, which moved one cell: the GroupNorm CNN in
// bf16 on a T4, largest batch 578 → 536; in the thirty-seventh for the
// host memory NCCL's and cuBLAS's set-up map into the context's freed
// reservation, which moved the allocator's share of ten cells by a few
// MiB and no answer). It pins the
// report's answers and the estimator's predictions together; a change to
// the report's sharing is checked against it, and TestSharedMatchesUnshared
// checks the sharing on its own.
const goldenReport = "testdata/report50x12.json.gz"

// TestReportMatchesGolden: the report's every cell, as JSON, is the one
// recorded before the searches were shared.
func TestReportMatchesGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("the 50 × 12 report")
	}
	o := Options{Band: tuner.DefaultBand, Margin: tuner.DefaultMargin, Version: "golden",
		Now: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)}
	r, err := Build(fiftyJobs(t), model.DeviceNames(), benchLoad, o)
	if err != nil && !errors.Is(err, ErrSomeFailed) {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := Write(&got, r, "json"); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("MEMPLAN_WRITE_GOLDEN") != "" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(got.Bytes())
		w.Close()
		if err := os.WriteFile(goldenReport, z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(goldenReport)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() == string(want) {
		return
	}
	g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, g[i], w[i])
		}
	}
	t.Fatalf("%d lines, want %d", len(g), len(w))
}
